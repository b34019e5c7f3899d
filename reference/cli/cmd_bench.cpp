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

#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/machine_info.h"
#include "reference/common/error.h"
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

}  // namespace

void add_bench_command(CLI::App& app) {
    struct Options {
        ModelOptions model;
        CacheOptions cache;
        SpeculationOptions speculation;
        int64_t prompt_tokens = 64;
        int32_t gen_tokens = 32;
        int repeats = 3;
        int num_completions = 1;
        bool json = false;
    };
    auto opts = std::make_shared<Options>();
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
    cmd->add_flag("--json", opts->json, "print one JSON object (for scripts and notebooks)");
    cmd->add_option("--repeats", opts->repeats)->check(CLI::Range(1, 1000))->capture_default_str();
    add_bench_throughput_command(*cmd);
    add_bench_speculative_command(*cmd);
    add_bench_allreduce_command(*cmd);
    add_bench_serve_command(*cmd);
    add_bench_quantize_command(*cmd);
    add_bench_prefix_cache_command(*cmd);
    cmd->callback([opts, cmd] {
        // A subcommand (throughput, speculative, ...) did the work.
        if (!cmd->get_subcommands().empty()) return;
        Model model = opts->model.load();
        if (opts->prompt_tokens + opts->gen_tokens > model.config.context_length) {
            throw Error(
                fmt::format("bench: {} prompt + {} generated tokens exceed the context "
                            "length {}",
                            opts->prompt_tokens, opts->gen_tokens, model.config.context_length));
        }
        ModelRunner runner(model.config, model.weights,
                           opts->model.runner_options(opts->cache.mla_mode()));
        const std::vector<TokenId> prompt = bench_prompt(model.tokenizer, opts->prompt_tokens);
        SamplingParams greedy;
        greedy.max_tokens = opts->gen_tokens;
        greedy.ignore_eos = true;  // always generate the full count

        std::vector<double> prefill_ms;
        std::vector<double> decode_ms;
        std::vector<std::vector<double>> latency_by_step(size_t(opts->gen_tokens));
        std::string kv_cache;
        for (int r = 0; r < opts->repeats; ++r) {
            // Without a cache, generation's first step is not a prefill (every
            // step recomputes everything), so prefill is timed on its own.
            if (opts->cache.disabled) {
                const auto start = std::chrono::steady_clock::now();
                runner.forward({prompt, 0});
                prefill_ms.push_back(std::chrono::duration<double, std::milli>(
                                         std::chrono::steady_clock::now() - start)
                                         .count());
            }
            // A fresh cache each repeat, so no repeat finds the last one's
            // prompt in the prefix cache.
            CliGenerator generator(opts->cache, model, runner, {}, opts->speculation);
            kv_cache = generator.describe();
            const std::vector<GenerationResult> results =
                generator.generate(prompt, greedy, opts->num_completions);
            if (!opts->cache.disabled) prefill_ms.push_back(results[0].timings.first_step_ms);
            double last_finish_ms = 0;
            for (const GenerationResult& r : results) {
                last_finish_ms = std::max(last_finish_ms, r.timings.total_ms);
            }
            // Without the paged cache the n completions ran one after another.
            double decode_total_ms = last_finish_ms - results[0].timings.first_step_ms;
            if (!generator.paged()) {
                decode_total_ms = 0;
                for (const GenerationResult& r : results) {
                    decode_total_ms += r.timings.total_ms - r.timings.first_step_ms;
                }
            }
            decode_ms.push_back(decode_total_ms);
            const GenerationResult& result = results[0];
            for (size_t i = 0; i < result.timings.step_latency_ms.size(); ++i) {
                latency_by_step[i].push_back(result.timings.step_latency_ms[i]);
            }
        }

        nlohmann::json latency = nlohmann::json::array();
        for (size_t i = 0; i < latency_by_step.size(); ++i) {
            latency.push_back({{"position", opts->prompt_tokens + int64_t(i)},
                               {"latency_ms", percentile(latency_by_step[i], 50)}});
        }
        const double decode_steps = double(opts->num_completions) * (opts->gen_tokens - 1);
        const nlohmann::json report = {
            {"model", model.config.name},
            {"mode", fmt::format("{}, weights as in the file, {} kernels",
                                 opts->cache.disabled ? "naive decoding (no KV cache)"
                                                      : fmt::format("KV cache {}", kv_cache),
                                 opts->model.cpu_kernels)},
            {"cpu_kernels", opts->model.cpu_kernels},
            {"kv_cache", !opts->cache.disabled},
            {"kv_layout", opts->cache.disabled              ? "none"
                          : opts->cache.paged(model.config) ? "paged"
                                                            : "contiguous"},
            {"n", opts->num_completions},
            {"kv_dtype", opts->cache.disabled ? "none" : opts->cache.kv_dtype},
            {"machine", {{"cpu", cpu_model_name()}, {"threads", omp_get_max_threads()}}},
            {"date", utc_date()},
            {"prompt_tokens", opts->prompt_tokens},
            {"gen_tokens", opts->gen_tokens},
            {"repeats", opts->repeats},
            {"prefill_ms", percentile(prefill_ms, 50)},
            {"prefill_tokens_per_s",
             1000.0 * double(opts->prompt_tokens) / percentile(prefill_ms, 50)},
            {"decode_tokens_per_s",
             decode_steps > 0 ? 1000.0 * decode_steps / percentile(decode_ms, 50) : 0.0},
            {"weight_bytes_per_token", decode_weight_bytes(model.weights)},
            {"weight_bytes_held", held_weight_bytes(model.weights)},
            {"latency_by_position", latency},
        };
        if (opts->json) {
            std::printf("%s\n", report.dump(2).c_str());
            return;
        }
        std::printf("%s, %s, %d threads\n", model.config.name.c_str(),
                    report["mode"].get<std::string>().c_str(), omp_get_max_threads());
        std::printf("prefill: %lld tokens in %.1f ms = %.1f tokens/s\n",
                    (long long)opts->prompt_tokens, percentile(prefill_ms, 50),
                    report["prefill_tokens_per_s"].get<double>());
        std::printf("decode:  %d tokens, %.2f tokens/s (median of %d)\n", opts->gen_tokens,
                    report["decode_tokens_per_s"].get<double>(), opts->repeats);
        std::printf("step latency by position (ms):");
        const size_t stride = std::max<size_t>(1, latency_by_step.size() / 8);
        for (size_t i = 0; i < latency_by_step.size(); i += stride) {
            std::printf(" %lld:%.1f", (long long)(opts->prompt_tokens + int64_t(i)),
                        percentile(latency_by_step[i], 50));
        }
        std::printf("\n(--json prints every figure as one JSON object)\n");
    });
}

}  // namespace servelab::cli
