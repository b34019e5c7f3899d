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

#include "kernels/common/error.h"
#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/experiments/trace.h"

namespace servelab::cli {
namespace {

struct ReplayCommandOptions {
    ModelOptions model;
    CacheOptions cache;
    TraceOptions trace{.path = "data/traces/shared_system_prompt.jsonl"};
    OutputOptions output;
};

// What the replay added up, over every request.
struct ReplayTotals {
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;
    int64_t generated = 0;
    double prefill_ms = 0;
    double total_ms = 0;
    nlohmann::json per_request = nlohmann::json::array();

    double hit_rate() const { return double(cached_tokens) / double(prompt_tokens); }
};

// Each request greedily, one after another, on the generator's one pool.
ReplayTotals replay_requests(const std::vector<TraceRequest>& trace, const Model& model,
                             CliGenerator& generator, bool log_progress) {
    ReplayTotals totals;
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < trace.size(); ++i) {
        const TraceRequest& r = trace[i];
        const std::vector<TokenId> prompt = trace_prompt_ids(r, model.config.vocab_size);
        SamplingParams params;
        params.ignore_eos = true;
        params.max_tokens = int32_t(r.output_tokens);  // --max-output already applied
        const GenerationResult result = generator.generate(prompt, params, 1).at(0);
        totals.prompt_tokens += int64_t(prompt.size());
        totals.cached_tokens += result.cached_prompt_tokens;
        totals.generated += int64_t(result.tokens.size());
        totals.prefill_ms += result.timings.first_step_ms;
        totals.per_request.push_back({{"id", r.id},
                                      {"prompt_tokens", prompt.size()},
                                      {"cached_prompt_tokens", result.cached_prompt_tokens},
                                      {"time_to_first_token_ms", result.timings.first_step_ms}});
        if (log_progress && (i + 1) % 10 == 0) {
            spdlog::info("{} / {} requests, prefix-cache hit rate so far {:.1f}%", i + 1,
                         trace.size(), 100.0 * totals.hit_rate());
        }
    }
    totals.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return totals;
}

void print_replay(size_t num_requests, const ReplayTotals& totals, int64_t tokens_computed) {
    std::printf(
        "%zu requests, %lld prompt tokens, %lld from the prefix cache (hit rate "
        "%.1f%%)\n",
        num_requests, (long long)totals.prompt_tokens, (long long)totals.cached_tokens,
        100 * totals.hit_rate());
    std::printf(
        "tokens computed by the model: %lld (prompt %lld + generated %lld without "
        "the cache)\n",
        (long long)tokens_computed, (long long)totals.prompt_tokens, (long long)totals.generated);
    std::printf("prefill %.0f ms in all, %.0f ms total\n", totals.prefill_ms, totals.total_ms);
}

void run_replay(const ReplayCommandOptions& opts) {
    const std::vector<TraceRequest> trace = opts.trace.load();
    Model model = opts.model.load();
    if (!opts.cache.paged(model.config)) {
        throw Error(
            "replay runs on the paged KV cache: drop --kv-layout contiguous / "
            "--no-kv-cache");
    }
    ModelRunner runner(model.config, model.weights, opts.model.runner_options());
    CliGenerator generator(opts.cache, model, runner);
    const ReplayTotals totals = replay_requests(trace, model, generator, !opts.output.json);
    if (!opts.output.json) {
        print_replay(trace.size(), totals, runner.num_tokens_computed());
        return;
    }
    print_json({{"trace", opts.trace.path},
                {"model", model.config.name},
                {"kv_cache", generator.describe()},
                {"requests", trace.size()},
                {"prompt_tokens", totals.prompt_tokens},
                {"cached_prompt_tokens", totals.cached_tokens},
                {"prefix_hit_rate", totals.hit_rate()},
                {"generated_tokens", totals.generated},
                {"tokens_computed", runner.num_tokens_computed()},
                {"prefill_ms", totals.prefill_ms},
                {"total_ms", totals.total_ms},
                {"per_request", totals.per_request}});
}

}  // namespace

void add_replay(CLI::App& app) {
    auto opts = std::make_shared<ReplayCommandOptions>();
    CLI::App* cmd = app.add_subcommand(
        "replay", "run a trace through the paged engine: prefix-cache hits and work (Lab 4)");
    opts->model.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->trace.add_to(*cmd, TraceOptions::kLimit | TraceOptions::kMaxOutput);
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_replay(*opts); });
}

}  // namespace servelab::cli
