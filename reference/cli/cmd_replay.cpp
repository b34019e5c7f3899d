// cmd_replay.cpp — `servelab replay`: run a trace's requests through the paged engine.
//
// Part of the CLI (Lab 4). Turns each trace line into a prompt of that many
// token ids (requests in the same prefix_group share their first
// prefix_tokens ids; the rest are the request's own) and generates its
// output greedily, one request after another, on ONE paged pool. Reports
// how many prompt tokens the prefix cache supplied (the hit rate) and how
// many tokens the model actually computed; with --no-prefix-caching every
// prompt token is computed. The ids are random: this measures the cache and
// the work, not the text.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/common/error.h"
#include "reference/experiments/trace.h"

namespace servelab::cli {

void add_replay_command(CLI::App& app) {
    struct Options {
        ModelOptions model;
        CacheOptions cache;
        std::string trace = "data/traces/shared_system_prompt.jsonl";
        int64_t limit = 0;
        int32_t max_output = 0;
        bool json = false;
    };
    auto opts = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "replay", "run a trace through the paged engine: prefix-cache hits and work (Lab 4)");
    opts->model.add_to(*cmd);
    opts->cache.add_to(*cmd);
    cmd->add_option("--trace", opts->trace, "JSONL trace (see data/traces/README.md)")
        ->capture_default_str();
    cmd->add_option("--limit", opts->limit, "replay only the first N requests (0 = all)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--max-output", opts->max_output, "cap each request's output (0 = trace's)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_flag("--json", opts->json, "print one JSON object");
    cmd->callback([opts] {
        std::vector<TraceRequest> trace = load_trace(opts->trace);
        if (opts->limit > 0 && opts->limit < int64_t(trace.size()))
            trace.resize(size_t(opts->limit));
        Model model = opts->model.load();
        if (!opts->cache.paged(model.config)) {
            throw Error(
                "replay runs on the paged KV cache: drop --kv-layout contiguous / "
                "--no-kv-cache");
        }
        ModelRunner runner(model.config, model.weights, opts->model.runner_options());
        CliGenerator generator(opts->cache, model, runner);

        int64_t prompt_tokens = 0, cached_tokens = 0, generated = 0;
        double prefill_ms = 0;
        nlohmann::json per_request = nlohmann::json::array();
        const auto start = std::chrono::steady_clock::now();
        for (size_t i = 0; i < trace.size(); ++i) {
            const TraceRequest& r = trace[i];
            const std::vector<TokenId> prompt = trace_prompt_ids(r, model.config.vocab_size);
            SamplingParams params;
            params.ignore_eos = true;
            params.max_tokens = int32_t(r.output_tokens);
            if (opts->max_output > 0)
                params.max_tokens = std::min(params.max_tokens, opts->max_output);
            const GenerationResult result = generator.generate(prompt, params, 1).at(0);
            prompt_tokens += int64_t(prompt.size());
            cached_tokens += result.cached_prompt_tokens;
            generated += int64_t(result.tokens.size());
            prefill_ms += result.timings.first_step_ms;
            per_request.push_back({{"id", r.id},
                                   {"prompt_tokens", prompt.size()},
                                   {"cached_prompt_tokens", result.cached_prompt_tokens},
                                   {"time_to_first_token_ms", result.timings.first_step_ms}});
            if (!opts->json && (i + 1) % 10 == 0) {
                spdlog::info("{} / {} requests, prefix-cache hit rate so far {:.1f}%", i + 1,
                             trace.size(), 100.0 * double(cached_tokens) / double(prompt_tokens));
            }
        }
        const double total_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        const double hit_rate = double(cached_tokens) / double(prompt_tokens);
        if (opts->json) {
            const nlohmann::json report = {{"trace", opts->trace},
                                           {"model", model.config.name},
                                           {"kv_cache", generator.describe()},
                                           {"requests", trace.size()},
                                           {"prompt_tokens", prompt_tokens},
                                           {"cached_prompt_tokens", cached_tokens},
                                           {"prefix_hit_rate", hit_rate},
                                           {"generated_tokens", generated},
                                           {"tokens_computed", runner.num_tokens_computed()},
                                           {"prefill_ms", prefill_ms},
                                           {"total_ms", total_ms},
                                           {"per_request", per_request}};
            std::printf("%s\n", report.dump(2).c_str());
            return;
        }
        std::printf(
            "%zu requests, %lld prompt tokens, %lld from the prefix cache (hit rate "
            "%.1f%%)\n",
            trace.size(), (long long)prompt_tokens, (long long)cached_tokens, 100 * hit_rate);
        std::printf(
            "tokens computed by the model: %lld (prompt %lld + generated %lld without "
            "the cache)\n",
            (long long)runner.num_tokens_computed(), (long long)prompt_tokens,
            (long long)generated);
        std::printf("prefill %.0f ms in all, %.0f ms total\n", prefill_ms, total_ms);
    });
}

}  // namespace servelab::cli
