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

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/experiments/serving_metrics.h"
#include "reference/experiments/trace.h"

namespace servelab::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchServeOptions {
    std::string url = "http://127.0.0.1:8000";
    std::string model;  // empty: the first of GET /v1/models
    std::string api_key;
    TraceOptions trace{.path = "data/traces/sharegpt_like.jsonl", .limit = 32};
    ArrivalOptions arrivals;
    std::string prompt_format = "text";  // or "ids"
    int64_t vocab_size = 49152;          // ids: random ids below SmolLM2's vocabulary size
    double slo_ttft_ms = 1000;
    double slo_tpot_ms = 100;
    uint64_t prompt_seed = 0;
    OutputOptions output;
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

// Reads a completion's SSE stream as its bytes arrive: the time to the
// first text, the gaps between later texts, and what the last chunks say
// (usage, finish reason).
class CompletionStreamReader {
  public:
    explicit CompletionStreamReader(Outcome& outcome)
        : outcome_(outcome), start_(Clock::now()), last_(start_) {}

    // cpp-httplib's content receiver: the next bytes of the body.
    bool receive(const char* data, size_t length) {
        pending_.append(data, length);
        for (size_t end; (end = pending_.find("\n\n")) != std::string::npos;) {
            const std::string event = pending_.substr(0, end);
            pending_.erase(0, end + 2);
            if (event.rfind("data: ", 0) != 0) continue;
            const std::string payload = event.substr(6);
            if (payload == "[DONE]") continue;
            const nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, false);
            if (!chunk.is_discarded()) read_chunk(chunk);
        }
        return true;
    }
    Clock::time_point start() const { return start_; }
    int64_t chunks_with_text() const { return chunks_with_text_; }
    int64_t usage_tokens() const { return usage_tokens_; }
    const std::string& finish_reason() const { return finish_reason_; }

  private:
    void read_chunk(const nlohmann::json& chunk) {
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
            usage_tokens_ = chunk["usage"].value("completion_tokens", int64_t(-1));
        }
        if (!chunk.contains("choices") || chunk["choices"].empty()) return;
        const nlohmann::json& choice = chunk["choices"][0];
        if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
            finish_reason_ = choice["finish_reason"].get<std::string>();
        }
        if (!choice.contains("text") || !choice["text"].is_string() ||
            choice["text"].get<std::string>().empty()) {
            return;
        }
        const Clock::time_point now = Clock::now();
        const double since_ms = std::chrono::duration<double, std::milli>(now - last_).count();
        if (chunks_with_text_ == 0) {
            outcome_.ttft_ms = std::chrono::duration<double, std::milli>(now - start_).count();
        } else {
            outcome_.itl_ms.push_back(since_ms);
        }
        last_ = now;
        ++chunks_with_text_;
    }

    Outcome& outcome_;
    std::string pending_;  // bytes of an event not yet complete
    Clock::time_point start_;
    Clock::time_point last_;
    int64_t chunks_with_text_ = 0;
    int64_t usage_tokens_ = -1;
    std::string finish_reason_;
};

// Without a usage chunk (llama.cpp's server sends none), a request that
// ran to its length made max_tokens tokens; chunks can hold several
// tokens (text held back while it might start a stop string), so they
// only count when nothing better is known.
void judge_outcome(Outcome& outcome, const CompletionStreamReader& reader, int64_t max_tokens) {
    if (reader.usage_tokens() >= 0) {
        outcome.output_tokens = reader.usage_tokens();
    } else if (reader.finish_reason() == "length") {
        outcome.output_tokens = max_tokens;
    } else {
        outcome.output_tokens = reader.chunks_with_text();
    }
    outcome.ok = reader.chunks_with_text() > 0;
    if (!outcome.ok) outcome.error = "the stream carried no text";
    if (outcome.ok && outcome.output_tokens != max_tokens) {
        outcome.ok = false;
        outcome.error = fmt::format(
            "asked for exactly {} tokens (min_tokens = max_tokens), got {} (finish_reason '{}'): "
            "does the server honour min_tokens?",
            max_tokens, outcome.output_tokens, reader.finish_reason());
    }
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
    CompletionStreamReader reader(outcome);
    request.content_receiver = [&reader](const char* data, size_t length, uint64_t, uint64_t) {
        return reader.receive(data, length);
    };
    const httplib::Result res = client.send(request);
    outcome.e2e_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - reader.start()).count();
    if (!res || res->status != 200) {
        outcome.error = res ? fmt::format("HTTP {}", res->status) : to_string(res.error());
        return outcome;
    }
    judge_outcome(outcome, reader, max_tokens);
    return outcome;
}

nlohmann::json summary_json(const LatencySummary& s) {
    return {{"mean", s.mean}, {"median", s.median}, {"p90", s.p90}, {"p99", s.p99}};
}

// Sends the trace's requests at their arrival times, each from its own
// thread, at most --max-concurrency in flight; returns when all are answered.
std::vector<Outcome> send_trace(const BenchServeOptions& opts, const std::string& model,
                                const std::vector<TraceRequest>& trace) {
    const std::vector<double> arrivals =
        poisson_arrivals_s(int64_t(trace.size()), opts.arrivals.request_rate, opts.arrivals.seed);
    const int64_t max_concurrency = opts.arrivals.max_concurrency;
    std::counting_semaphore<> slots(
        std::ptrdiff_t(max_concurrency > 0 ? max_concurrency : int64_t(trace.size())));
    std::vector<Outcome> outcomes(trace.size());
    std::vector<std::thread> senders;
    const Clock::time_point start = Clock::now();
    for (size_t i = 0; i < trace.size(); ++i) {
        const TraceRequest& request = trace[i];  // --max-prompt and --max-output applied
        nlohmann::json prompt =
            opts.prompt_format == "ids"
                ? nlohmann::json(trace_prompt_ids(request, opts.vocab_size, opts.prompt_seed))
                : nlohmann::json(trace_prompt_text(request, opts.prompt_seed));
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(arrivals[i])));
        slots.acquire();
        senders.emplace_back([&, i, prompt = std::move(prompt), max_tokens = request.output_tokens,
                              prompt_tokens = request.prompt_tokens] {
            outcomes[i] = send_one(opts, model, prompt, prompt_tokens, max_tokens);
            slots.release();
        });
    }
    for (std::thread& sender : senders) sender.join();
    return outcomes;
}

// The completed requests' figures, and the failed ones' errors.
struct ServeTally {
    std::vector<double> ttft, tpot, itl, e2e;
    int64_t completed = 0, prompt_tokens = 0, output_tokens = 0, good = 0;
    std::vector<std::string> errors;
};

ServeTally tally_outcomes(const BenchServeOptions& opts, const std::vector<Outcome>& outcomes) {
    ServeTally t;
    for (const Outcome& o : outcomes) {
        if (!o.ok) {
            t.errors.push_back(o.error);
            continue;
        }
        ++t.completed;
        t.prompt_tokens += o.prompt_tokens;
        t.output_tokens += o.output_tokens;
        t.ttft.push_back(o.ttft_ms);
        t.e2e.push_back(o.e2e_ms);
        t.itl.insert(t.itl.end(), o.itl_ms.begin(), o.itl_ms.end());
        const double request_tpot =
            o.output_tokens > 1 ? (o.e2e_ms - o.ttft_ms) / double(o.output_tokens - 1) : 0.0;
        if (o.output_tokens > 1) t.tpot.push_back(request_tpot);
        if (o.ttft_ms <= opts.slo_ttft_ms && request_tpot <= opts.slo_tpot_ms) ++t.good;
    }
    return t;
}

nlohmann::json serve_report(const BenchServeOptions& opts, const std::string& model,
                            size_t num_requests, const ServeTally& t, double duration_s) {
    return {
        {"url", opts.url},
        {"model", model},
        {"trace", opts.trace.path},
        {"prompt_format", opts.prompt_format},
        {"prompt_seed", opts.prompt_seed},
        {"max_prompt", opts.trace.max_prompt_tokens},
        {"max_output", opts.trace.max_output_tokens},
        {"prompt_tokens", t.prompt_tokens},
        {"output_tokens", t.output_tokens},
        {"request_rate", opts.arrivals.request_rate},
        {"max_concurrency", opts.arrivals.max_concurrency},
        {"num_requests", int64_t(num_requests)},
        {"completed", t.completed},
        {"failed", int64_t(t.errors.size())},
        {"first_error", t.errors.empty() ? "" : t.errors[0]},
        {"duration_s", duration_s},
        {"requests_per_s", t.completed / duration_s},
        {"output_tokens_per_s", t.output_tokens / duration_s},
        {"total_tokens_per_s", (t.prompt_tokens + t.output_tokens) / duration_s},
        {"goodput_requests_per_s", t.good / duration_s},
        {"slo_ttft_ms", opts.slo_ttft_ms},
        {"slo_tpot_ms", opts.slo_tpot_ms},
        {"ttft_ms", summary_json(summarize_latency(t.ttft))},
        {"tpot_ms", summary_json(summarize_latency(t.tpot))},
        {"itl_ms", summary_json(summarize_latency(t.itl))},
        {"e2e_ms", summary_json(summarize_latency(t.e2e))},
    };
}

void print_serve_report(const BenchServeOptions& opts, const std::string& model,
                        size_t num_requests, const ServeTally& t, double duration_s) {
    std::printf("%s (%s): %lld of %zu requests completed in %.1f s\n", opts.url.c_str(),
                model.c_str(), (long long)t.completed, num_requests, duration_s);
    std::printf(
        "throughput: %.2f requests/s, %.1f output tokens/s, %.1f total tokens/s; "
        "goodput (TTFT <= %.0f ms, TPOT <= %.0f ms): %.2f requests/s\n",
        t.completed / duration_s, t.output_tokens / duration_s,
        (t.prompt_tokens + t.output_tokens) / duration_s, opts.slo_ttft_ms, opts.slo_tpot_ms,
        t.good / duration_s);
    std::printf("%-6s %10s %10s %10s %10s   (ms)\n", "", "mean", "median", "p90", "p99");
    const std::pair<const char*, const std::vector<double>*> rows[] = {
        {"TTFT", &t.ttft}, {"TPOT", &t.tpot}, {"ITL", &t.itl}, {"E2E", &t.e2e}};
    for (const auto& [name, values] : rows) {
        const LatencySummary s = summarize_latency(*values);
        std::printf("%-6s %10.1f %10.1f %10.1f %10.1f\n", name, s.mean, s.median, s.p90, s.p99);
    }
}

void run_bench_serve(const BenchServeOptions& opts) {
    const std::vector<TraceRequest> trace = opts.trace.load();
    const std::string model = opts.model.empty() ? first_model(opts) : opts.model;
    const ArrivalOptions& arrivals = opts.arrivals;
    spdlog::info(
        "bench serve: {} requests of {} to {} ({}), rate {}, concurrency {}", trace.size(),
        opts.trace.path, opts.url, model,
        arrivals.request_rate > 0 ? fmt::format("{}/s", arrivals.request_rate) : "all at once",
        arrivals.max_concurrency > 0 ? std::to_string(arrivals.max_concurrency) : "unlimited");
    const Clock::time_point start = Clock::now();
    const std::vector<Outcome> outcomes = send_trace(opts, model, trace);
    const double duration_s = std::chrono::duration<double>(Clock::now() - start).count();
    const ServeTally tally = tally_outcomes(opts, outcomes);
    if (opts.output.json) {
        print_json(serve_report(opts, model, trace.size(), tally, duration_s));
    } else {
        print_serve_report(opts, model, trace.size(), tally, duration_s);
    }
    if (!tally.errors.empty()) {
        throw Error(fmt::format("bench serve: {} of {} requests failed, the first with: {}",
                                tally.errors.size(), trace.size(), tally.errors[0]));
    }
}

}  // namespace

void add_bench_serve(CLI::App& bench) {
    auto opts = std::make_shared<BenchServeOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "serve", "replay a trace against an OpenAI-compatible server: throughput and latency");
    cmd->add_option("--url", opts->url, "the server")->capture_default_str();
    cmd->add_option("--model", opts->model, "model name to send (default: the server's first)");
    cmd->add_option("--api-key", opts->api_key, "sent as a Bearer token");
    opts->trace.add_to(*cmd,
                       TraceOptions::kLimit | TraceOptions::kMaxOutput | TraceOptions::kMaxPrompt);
    opts->arrivals.add_to(*cmd);
    cmd->add_option("--prompt-format", opts->prompt_format,
                    "text (common words, one SmolLM2 token each) or ids (token ids)")
        ->check(CLI::IsMember({"text", "ids"}))
        ->capture_default_str();
    cmd->add_option("--vocab-size", opts->vocab_size, "ids: prompts are random ids below this")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->add_option("--slo-ttft-ms", opts->slo_ttft_ms, "goodput's TTFT target")
        ->capture_default_str();
    cmd->add_option("--slo-tpot-ms", opts->slo_tpot_ms, "goodput's TPOT target")
        ->capture_default_str();
    cmd->add_option("--prompt-seed", opts->prompt_seed,
                    "draws other prompts of the same lengths (defeats a server's prefix cache "
                    "across repeated runs)")
        ->capture_default_str();
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_bench_serve(*opts); });
}

}  // namespace servelab::cli
