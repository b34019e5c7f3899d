// cmd_bench_serve.cpp — `servelab bench serve`: a trace against any OpenAI-compatible server.
//
// Part of the serving layer (chapter 11.7). The client side of a
// serving benchmark, as vLLM's benchmark_serving does it: each request of a
// trace (data/traces/, lengths only) is sent to POST /v1/completions,
// streamed, with min_tokens = max_tokens and ignore_eos so it generates
// exactly its output length (vLLM, llama.cpp and servelab honour both), at its
// arrival time (a Poisson process of --request-rate, or all
// at once) and at most --max-concurrency at a time. From the stream's
// arrival times it computes, per request and pooled (serving_metrics.h):
// TTFT, TPOT, ITL and end-to-end latency, and overall request and token
// throughput and goodput (requests per second that met the --slo-ttft-ms
// and --slo-tpot-ms targets). The same command measures servelab and any
// other server (llama.cpp's) on the same model and machine. Prompts are
// text by default (trace_prompt_text: one common word per SmolLM2 token, so
// servers that take no token ids get the same work) or, with
// --prompt-format ids, the token ids themselves.
#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <semaphore>
#include <thread>

#include "reference/cli/commands.h"
#include "reference/common/error.h"
#include "reference/experiments/serving_metrics.h"
#include "reference/experiments/trace.h"

namespace servelab::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchServeOptions {
    std::string url = "http://127.0.0.1:8000";
    std::string model;  // empty: the first of GET /v1/models
    std::string api_key;
    std::string trace = "data/traces/sharegpt_like.jsonl";
    int64_t limit = 32;
    double request_rate = 0;             // requests/s; 0 = all at once
    int64_t max_concurrency = 0;         // 0 = unlimited
    std::string prompt_format = "text";  // or "ids"
    int64_t vocab_size = 49152;          // ids: random ids below SmolLM2's vocabulary size
    int64_t max_prompt = 0;              // caps, 0 = the trace's lengths
    int64_t max_output = 0;
    double slo_ttft_ms = 1000;
    double slo_tpot_ms = 100;
    uint64_t seed = 0;
    uint64_t prompt_seed = 0;
    bool json = false;
};

struct Outcome {
    bool ok = false;
    std::string error;
    int64_t prompt_tokens = 0;
    int64_t output_tokens = 0;
    double ttft_ms = 0, e2e_ms = 0;
    std::vector<double> itl_ms;  // gaps between token-bearing chunks
};

httplib::Headers auth_headers(const BenchServeOptions& opts) {
    if (opts.api_key.empty()) return {};
    return {{"Authorization", "Bearer " + opts.api_key}};
}

std::string first_model(const BenchServeOptions& opts) {
    httplib::Client client(opts.url);
    client.set_connection_timeout(5);
    const httplib::Result res = client.Get("/v1/models", auth_headers(opts));
    if (!res || res->status != 200) {
        throw Error(
            fmt::format("bench serve: GET {}/v1/models failed ({}): is the server up?", opts.url,
                        res ? fmt::format("HTTP {}", res->status) : to_string(res.error())));
    }
    const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
    if (body.is_discarded() || !body.contains("data") || body["data"].empty()) {
        throw Error("bench serve: /v1/models listed no model; pass --model");
    }
    return body["data"][0].value("id", "");
}

// Sends one request and reads its stream; times are taken as bytes arrive.
// `prompt` is a string or a list of token ids, `prompt_tokens` its length.
Outcome send_one(const BenchServeOptions& opts, const std::string& model,
                 const nlohmann::json& prompt, int64_t prompt_tokens, int64_t max_tokens) {
    Outcome outcome;
    outcome.prompt_tokens = prompt_tokens;
    const nlohmann::json body = {{"model", model},
                                 {"prompt", prompt},
                                 {"max_tokens", max_tokens},
                                 {"min_tokens", max_tokens},
                                 // Both, because a server may honour only one of them
                                 // (llama.cpp's ends a batched slot at EOS despite min_tokens).
                                 {"ignore_eos", true},
                                 {"temperature", 0},
                                 {"stream", true},
                                 {"stream_options", {{"include_usage", true}}}};
    httplib::Client client(opts.url);
    client.set_read_timeout(600);
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.headers = auth_headers(opts);
    request.set_header("Content-Type", "application/json");
    request.body = body.dump();
    std::string pending;
    int64_t chunks_with_text = 0;
    int64_t usage_tokens = -1;
    std::string finish_reason;
    const Clock::time_point start = Clock::now();
    Clock::time_point last = start;
    request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
        pending.append(data, length);
        for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
            const std::string event = pending.substr(0, end);
            pending.erase(0, end + 2);
            if (event.rfind("data: ", 0) != 0) continue;
            const std::string payload = event.substr(6);
            if (payload == "[DONE]") continue;
            const nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, false);
            if (chunk.is_discarded()) continue;
            if (chunk.contains("usage") && chunk["usage"].is_object()) {
                usage_tokens = chunk["usage"].value("completion_tokens", int64_t(-1));
            }
            if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
            const nlohmann::json& choice = chunk["choices"][0];
            if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
                finish_reason = choice["finish_reason"].get<std::string>();
            }
            if (!choice.contains("text") || !choice["text"].is_string() ||
                choice["text"].get<std::string>().empty()) {
                continue;
            }
            const Clock::time_point now = Clock::now();
            const double since_ms = std::chrono::duration<double, std::milli>(now - last).count();
            if (chunks_with_text == 0) {
                outcome.ttft_ms = std::chrono::duration<double, std::milli>(now - start).count();
            } else {
                outcome.itl_ms.push_back(since_ms);
            }
            last = now;
            ++chunks_with_text;
        }
        return true;
    };
    const httplib::Result res = client.send(request);
    outcome.e2e_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!res || res->status != 200) {
        outcome.error = res ? fmt::format("HTTP {}", res->status) : to_string(res.error());
        return outcome;
    }
    // Without a usage chunk (llama.cpp's server sends none), a request that
    // ran to its length made max_tokens tokens; chunks can hold several
    // tokens (text held back while it might start a stop string), so they
    // only count when nothing better is known.
    if (usage_tokens >= 0) {
        outcome.output_tokens = usage_tokens;
    } else if (finish_reason == "length") {
        outcome.output_tokens = max_tokens;
    } else {
        outcome.output_tokens = chunks_with_text;
    }
    outcome.ok = chunks_with_text > 0;
    if (!outcome.ok) outcome.error = "the stream carried no text";
    if (outcome.ok && outcome.output_tokens != max_tokens) {
        outcome.ok = false;
        outcome.error = fmt::format(
            "asked for exactly {} tokens (min_tokens = max_tokens), got {} (finish_reason '{}'): "
            "does the server honour min_tokens?",
            max_tokens, outcome.output_tokens, finish_reason);
    }
    return outcome;
}

nlohmann::json summary_json(const LatencySummary& s) {
    return {{"mean", s.mean}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99}};
}

void run(const BenchServeOptions& opts) {
    std::vector<TraceRequest> trace = load_trace(opts.trace);
    if (opts.limit > 0 && int64_t(trace.size()) > opts.limit) trace.resize(size_t(opts.limit));
    const std::string model = opts.model.empty() ? first_model(opts) : opts.model;
    const std::vector<double> arrivals =
        poisson_arrivals_s(int64_t(trace.size()), opts.request_rate, opts.seed);
    std::counting_semaphore<> slots(
        std::ptrdiff_t(opts.max_concurrency > 0 ? opts.max_concurrency : int64_t(trace.size())));
    std::vector<Outcome> outcomes(trace.size());
    std::vector<std::thread> senders;
    spdlog::info("bench serve: {} requests of {} to {} ({}), rate {}, concurrency {}", trace.size(),
                 opts.trace, opts.url, model,
                 opts.request_rate > 0 ? fmt::format("{}/s", opts.request_rate) : "all at once",
                 opts.max_concurrency > 0 ? std::to_string(opts.max_concurrency) : "unlimited");
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < trace.size(); ++i) {
        TraceRequest request = trace[i];
        if (opts.max_prompt > 0) {
            request.truncate_prompt(opts.max_prompt);
        }
        nlohmann::json prompt =
            opts.prompt_format == "ids"
                ? nlohmann::json(trace_prompt_ids(request, opts.vocab_size, opts.prompt_seed))
                : nlohmann::json(trace_prompt_text(request, opts.prompt_seed));
        const int64_t max_tokens = opts.max_output > 0
                                       ? std::min(opts.max_output, trace[i].output_tokens)
                                       : trace[i].output_tokens;
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(arrivals[i])));
        slots.acquire();
        senders.emplace_back(
            [&, i, prompt = std::move(prompt), max_tokens, prompt_tokens = request.prompt_tokens] {
                outcomes[i] = send_one(opts, model, prompt, prompt_tokens, max_tokens);
                slots.release();
            });
    }
    for (std::thread& sender : senders) sender.join();
    const double duration_s = std::chrono::duration<double>(Clock::now() - start).count();

    std::vector<double> ttft, tpot, itl, e2e;
    int64_t completed = 0, prompt_tokens = 0, output_tokens = 0, good = 0;
    std::vector<std::string> errors;
    for (const Outcome& o : outcomes) {
        if (!o.ok) {
            errors.push_back(o.error);
            continue;
        }
        ++completed;
        prompt_tokens += o.prompt_tokens;
        output_tokens += o.output_tokens;
        ttft.push_back(o.ttft_ms);
        e2e.push_back(o.e2e_ms);
        itl.insert(itl.end(), o.itl_ms.begin(), o.itl_ms.end());
        const double request_tpot =
            o.output_tokens > 1 ? (o.e2e_ms - o.ttft_ms) / double(o.output_tokens - 1) : 0.0;
        if (o.output_tokens > 1) tpot.push_back(request_tpot);
        if (o.ttft_ms <= opts.slo_ttft_ms && request_tpot <= opts.slo_tpot_ms) ++good;
    }
    const LatencySummary ttft_s = summarize_latency(ttft), tpot_s = summarize_latency(tpot),
                         itl_s = summarize_latency(itl), e2e_s = summarize_latency(e2e);
    const nlohmann::json report = {
        {"url", opts.url},
        {"model", model},
        {"trace", opts.trace},
        {"prompt_format", opts.prompt_format},
        {"prompt_seed", opts.prompt_seed},
        {"max_prompt", opts.max_prompt},
        {"max_output", opts.max_output},
        {"prompt_tokens", prompt_tokens},
        {"output_tokens", output_tokens},
        {"request_rate", opts.request_rate},
        {"max_concurrency", opts.max_concurrency},
        {"num_requests", int64_t(trace.size())},
        {"completed", completed},
        {"failed", int64_t(errors.size())},
        {"first_error", errors.empty() ? "" : errors[0]},
        {"duration_s", duration_s},
        {"requests_per_s", completed / duration_s},
        {"output_tokens_per_s", output_tokens / duration_s},
        {"total_tokens_per_s", (prompt_tokens + output_tokens) / duration_s},
        {"goodput_requests_per_s", good / duration_s},
        {"slo_ttft_ms", opts.slo_ttft_ms},
        {"slo_tpot_ms", opts.slo_tpot_ms},
        {"ttft_ms", summary_json(ttft_s)},
        {"tpot_ms", summary_json(tpot_s)},
        {"itl_ms", summary_json(itl_s)},
        {"e2e_ms", summary_json(e2e_s)},
    };
    if (opts.json) {
        std::printf("%s\n", report.dump(2).c_str());
    } else {
        std::printf("%s (%s): %lld of %zu requests completed in %.1f s\n", opts.url.c_str(),
                    model.c_str(), (long long)completed, trace.size(), duration_s);
        std::printf(
            "throughput: %.2f requests/s, %.1f output tokens/s, %.1f total tokens/s; "
            "goodput (TTFT <= %.0f ms, TPOT <= %.0f ms): %.2f requests/s\n",
            completed / duration_s, output_tokens / duration_s,
            (prompt_tokens + output_tokens) / duration_s, opts.slo_ttft_ms, opts.slo_tpot_ms,
            good / duration_s);
        std::printf("%-6s %10s %10s %10s %10s   (ms)\n", "", "mean", "median", "p90", "p99");
        for (const auto& [name, s] : {std::pair{"TTFT", ttft_s}, std::pair{"TPOT", tpot_s},
                                      std::pair{"ITL", itl_s}, std::pair{"E2E", e2e_s}}) {
            std::printf("%-6s %10.1f %10.1f %10.1f %10.1f\n", name, s.mean, s.median, s.p90, s.p99);
        }
    }
    if (!errors.empty()) {
        throw Error(fmt::format("bench serve: {} of {} requests failed, the first with: {}",
                                errors.size(), trace.size(), errors[0]));
    }
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
    auto opts = std::make_shared<BenchServeOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "serve", "replay a trace against an OpenAI-compatible server: throughput and latency");
    cmd->add_option("--url", opts->url, "the server")->capture_default_str();
    cmd->add_option("--model", opts->model, "model name to send (default: the server's first)");
    cmd->add_option("--api-key", opts->api_key, "sent as a Bearer token");
    cmd->add_option("--trace", opts->trace, "a trace of data/traces/")->capture_default_str();
    cmd->add_option("--limit", opts->limit, "the trace's first N requests (0 = all)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--request-rate", opts->request_rate,
                    "Poisson arrivals per second (0 = all at once)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--max-concurrency", opts->max_concurrency,
                    "requests in flight at most (0 = no cap)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--prompt-format", opts->prompt_format,
                    "text (common words, one SmolLM2 token each) or ids (token ids)")
        ->check(CLI::IsMember({"text", "ids"}))
        ->capture_default_str();
    cmd->add_option("--vocab-size", opts->vocab_size, "ids: prompts are random ids below this")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--max-prompt", opts->max_prompt, "cap on prompt tokens (0 = the trace's)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-output", opts->max_output, "cap on output tokens (0 = the trace's)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--slo-ttft-ms", opts->slo_ttft_ms, "goodput's TTFT target")
        ->capture_default_str();
    cmd->add_option("--slo-tpot-ms", opts->slo_tpot_ms, "goodput's TPOT target")
        ->capture_default_str();
    cmd->add_option("--seed", opts->seed, "arrival times' seed")->capture_default_str();
    cmd->add_option("--prompt-seed", opts->prompt_seed,
                    "draws other prompts of the same lengths (defeats a server's prefix cache "
                    "across repeated runs)")
        ->capture_default_str();
    cmd->add_flag("--json", opts->json, "print one JSON object");
    cmd->callback([opts] { run(*opts); });
}

}  // namespace servelab::cli
