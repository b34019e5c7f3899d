// cmd_bench.cpp — `servelab bench`: prefill and decode throughput, as JSON.
//
// Part of the CLI (all labs). Measures, on the loaded model and this machine
// (a summary, or one JSON object with --json):
//   prefill: one forward pass over a prompt of --prompt-tokens tokens;
//   decode:  --gen-tokens greedy tokens after it, with the latency of each
//            step by position. With the KV cache (default) a decode step
//            computes one token; with --no-kv-cache every step recomputes the
//            whole sequence, so the latency grows with the position — Lab 1's
//            lesson, and the gap Lab 2 closes.
// With -n N the prompt gets N completions (parallel sampling, Lab 4): the
// prompt is computed once and decode tokens/s counts all N completions.
// Each figure is the median of --repeats runs. Record results in docs/perf.md
// with the machine and the date.
#include <fmt/format.h>
#include <omp.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "kernels/common/error.h"
#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/machine_info.h"
#include "reference/engine/generator.h"
#include "reference/experiments/serving_metrics.h"
#include "reference/model/model_weights.h"

namespace servelab::cli {
namespace {

constexpr const char* kBenchText =
    "The history of computing is a story of layers: each generation of engineers builds on "
    "the abstractions of the last, and the best systems let a reader see every layer at once. ";

// A realistic prompt: English text, tokenized, repeated to the length asked for.
std::vector<TokenId> bench_prompt(const Tokenizer& tokenizer, int64_t num_tokens) {
    const std::vector<TokenId> paragraph = tokenizer.encode(kBenchText, false);
    std::vector<TokenId> prompt;
    while (int64_t(prompt.size()) < num_tokens) {
        prompt.push_back(paragraph[prompt.size() % paragraph.size()]);
    }
    return prompt;
}

struct BenchOptions {
    ModelOptions model;
    CacheOptions cache;
    SpeculationOptions speculation;
    int64_t prompt_tokens = 64;
    int32_t gen_tokens = 32;
    RepeatOptions repeat{.repeats = 3};
    int num_completions = 1;
    OutputOptions output;
};

// Every repeat's figures, in milliseconds: medians are taken for the report.
struct BenchTimings {
    std::vector<double> prefill_ms;
    std::vector<double> decode_ms;
    std::vector<std::vector<double>> latency_by_step;  // [step][repeat]
    std::string kv_cache;                              // the cache, described
};

// The decode time of one repeat's completions, first token excluded.
double decode_total_ms(const std::vector<GenerationResult>& results, bool paged) {
    double last_finish_ms = 0;
    for (const GenerationResult& r : results) {
        last_finish_ms = std::max(last_finish_ms, r.timings.total_ms);
    }
    if (paged) return last_finish_ms - results[0].timings.first_step_ms;
    // Without the paged cache the n completions ran one after another.
    double total_ms = 0;
    for (const GenerationResult& r : results) {
        total_ms += r.timings.total_ms - r.timings.first_step_ms;
    }
    return total_ms;
}

BenchTimings time_generation(const BenchOptions& opts, const Model& model, ModelRunner& runner,
                             const std::vector<TokenId>& prompt) {
    SamplingParams greedy;
    greedy.max_tokens = opts.gen_tokens;
    greedy.ignore_eos = true;  // always generate the full count
    BenchTimings timings;
    timings.latency_by_step.resize(size_t(opts.gen_tokens));
    for (int r = 0; r < opts.repeat.repeats; ++r) {
        // Without a cache, generation's first step is not a prefill (every
        // step recomputes everything), so prefill is timed on its own.
        if (opts.cache.disabled) {
            const auto start = std::chrono::steady_clock::now();
            runner.forward({prompt, 0});
            timings.prefill_ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
        }
        // A fresh cache each repeat, so no repeat finds the last one's
        // prompt in the prefix cache.
        CliGenerator generator(opts.cache, model, runner, {}, opts.speculation);
        timings.kv_cache = generator.describe();
        const std::vector<GenerationResult> results =
            generator.generate(prompt, greedy, opts.num_completions);
        if (!opts.cache.disabled) timings.prefill_ms.push_back(results[0].timings.first_step_ms);
        timings.decode_ms.push_back(decode_total_ms(results, generator.paged()));
        const GenerationResult& result = results[0];
        for (size_t i = 0; i < result.timings.step_latency_ms.size(); ++i) {
            timings.latency_by_step[i].push_back(result.timings.step_latency_ms[i]);
        }
    }
    return timings;
}

nlohmann::json bench_report(const BenchOptions& opts, const Model& model,
                            const BenchTimings& timings) {
    nlohmann::json latency = nlohmann::json::array();
    for (size_t i = 0; i < timings.latency_by_step.size(); ++i) {
        latency.push_back({{"position", opts.prompt_tokens + int64_t(i)},
                           {"latency_ms", percentile(timings.latency_by_step[i], 50)}});
    }
    const double decode_steps = double(opts.num_completions) * (opts.gen_tokens - 1);
    const double prefill_ms = percentile(timings.prefill_ms, 50);
    return {
        {"model", model.config.name},
        {"mode", fmt::format("{}, weights as in the file, {} kernels",
                             opts.cache.disabled ? "naive decoding (no KV cache)"
                                                 : fmt::format("KV cache {}", timings.kv_cache),
                             opts.model.cpu_kernels)},
        {"cpu_kernels", opts.model.cpu_kernels},
        {"kv_cache", !opts.cache.disabled},
        {"kv_layout", opts.cache.disabled              ? "none"
                      : opts.cache.paged(model.config) ? "paged"
                                                       : "contiguous"},
        {"n", opts.num_completions},
        {"kv_dtype", opts.cache.disabled ? "none" : opts.cache.kv_dtype},
        {"machine", {{"cpu", cpu_model_name()}, {"threads", omp_get_max_threads()}}},
        {"date", utc_date()},
        {"prompt_tokens", opts.prompt_tokens},
        {"gen_tokens", opts.gen_tokens},
        {"repeats", opts.repeat.repeats},
        {"prefill_ms", prefill_ms},
        {"prefill_tokens_per_s", 1000.0 * double(opts.prompt_tokens) / prefill_ms},
        {"decode_tokens_per_s",
         decode_steps > 0 ? 1000.0 * decode_steps / percentile(timings.decode_ms, 50) : 0.0},
        {"weight_bytes_per_token", decode_weight_bytes(model.weights)},
        {"weight_bytes_held", held_weight_bytes(model.weights)},
        {"latency_by_position", latency},
    };
}

void print_bench(const BenchOptions& opts, const Model& model, const BenchTimings& timings,
                 const nlohmann::json& report) {
    std::printf("%s, %s, %d threads\n", model.config.name.c_str(),
                report["mode"].get<std::string>().c_str(), omp_get_max_threads());
    std::printf("prefill: %lld tokens in %.1f ms = %.1f tokens/s\n", (long long)opts.prompt_tokens,
                percentile(timings.prefill_ms, 50), report["prefill_tokens_per_s"].get<double>());
    std::printf("decode:  %d tokens, %.2f tokens/s (median of %d)\n", opts.gen_tokens,
                report["decode_tokens_per_s"].get<double>(), opts.repeat.repeats);
    std::printf("step latency by position (ms):");
    const size_t stride = std::max<size_t>(1, timings.latency_by_step.size() / 8);
    for (size_t i = 0; i < timings.latency_by_step.size(); i += stride) {
        std::printf(" %lld:%.1f", (long long)(opts.prompt_tokens + int64_t(i)),
                    percentile(timings.latency_by_step[i], 50));
    }
    std::printf("\n(--json prints every figure as one JSON object)\n");
}

void run_bench(const BenchOptions& opts) {
    Model model = opts.model.load();
    if (opts.prompt_tokens + opts.gen_tokens > model.config.context_length) {
        throw Error(
            fmt::format("bench: {} prompt + {} generated tokens exceed the context "
                        "length {}",
                        opts.prompt_tokens, opts.gen_tokens, model.config.context_length));
    }
    ModelRunner runner(model.config, model.weights,
                       opts.model.runner_options(opts.cache.mla_mode()));
    const std::vector<TokenId> prompt = bench_prompt(model.tokenizer, opts.prompt_tokens);
    const BenchTimings timings = time_generation(opts, model, runner, prompt);
    const nlohmann::json report = bench_report(opts, model, timings);
    if (opts.output.json) {
        print_json(report);
    } else {
        print_bench(opts, model, timings, report);
    }
}

}  // namespace

void add_bench(CLI::App& app) {
    auto opts = std::make_shared<BenchOptions>();
    CLI::App* cmd = app.add_subcommand("bench", "measure prefill and decode speed (JSON)");
    opts->model.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->speculation.add_to(*cmd);
    cmd->add_option("--prompt-tokens", opts->prompt_tokens)
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--gen-tokens", opts->gen_tokens)
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("-n,--n", opts->num_completions, "completions per prompt (parallel sampling)")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    opts->output.add_to(*cmd, "print one JSON object (for scripts and notebooks)");
    opts->repeat.add_to(*cmd, "runs measured (each figure is their median)", 1000);
    add_bench_throughput(*cmd);
    add_bench_speculative(*cmd);
    add_bench_allreduce(*cmd);
    add_bench_serve(*cmd);
    add_bench_quantize(*cmd);
    add_bench_prefix_cache(*cmd);
    add_bench_structured(*cmd);
    add_bench_grammar(*cmd);
    // With a subcommand (throughput, speculative, ...) that one does the work.
    cmd->callback([opts, cmd] {
        if (cmd->get_subcommands().empty()) run_bench(*opts);
    });
}

}  // namespace servelab::cli
