// cmd_bench_speculative.cpp — `servelab bench speculative`: when drafting pays, and when it does
// not.
//
// Part of the CLI (Lab 6, chapter 11.6). Runs the same prompts plainly and
// with each drafter at each K, interleaved round by round (so a busy machine
// slows every arm alike), greedy, and reports per arm:
//   α                the per-draft acceptance rate (kept / judged);
//   tokens per pass  measured, beside (1 - α^(K+1)) / (1 - α), what i.i.d.
//                    acceptance at rate α predicts;
//   the costs        a verification pass's time and the drafter's time per
//                    pass, each in units of a plain decode step;
//   the speedup      decode tokens/s against plain decoding (median of the
//                    rounds' ratios), and the one the costs predict:
//                    tokens per pass / (verify cost + draft cost) over the
//                    steps that verify; over all decode steps, a share f of
//                    them verifying (an n-gram drafter finds no match in
//                    the others): (f·tokens per pass + 1 − f) /
//                    (f·(verify + draft) + 1 − f).
// Greedy speculation must not change a single token: any arm whose output
// differs from plain decoding's is an error, not a result.
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>

#include "kernels/common/error.h"
#include "reference/chat/chat_format.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/machine_info.h"
#include "reference/engine/engine.h"
#include "reference/engine/request_builder.h"
#include "reference/experiments/serving_metrics.h"
#include "reference/speculative/model_drafter.h"

namespace servelab::cli {
namespace {

struct SpeculativeBenchOptions {
    ModelOptions model;
    std::string prompts_file = "data/prompts/speculative.json";
    std::vector<std::string> workloads = {"repetitive", "open"};
    std::vector<std::string> drafters = {"ngram", "early-exit"};
    std::vector<int32_t> ks = {2, 4, 8};
    int64_t early_exit_layers = 0;
    std::string draft_model_path;
    int32_t max_tokens = 64;
    int64_t num_prompts = 0;  // 0: all of a workload's
    int64_t batch = 1;
    RepeatOptions repeat{.repeats = 3};
    OutputOptions output;
};

// One arm: plain decoding (k = 0) or one drafter at one K.
struct Arm {
    std::string drafter;  // "" for plain
    int32_t k = 0;
    // Per round.
    std::vector<double> decode_ms;
    std::vector<int64_t> decode_tokens;
    // Summed over rounds.
    SpeculativeStats stats;
    double verify_step_ms = 0;  // steps that verified drafts, drafting excluded
    int64_t verify_steps = 0;
    double draft_ms = 0;       // the drafters' time in those steps
    double plain_step_ms = 0;  // decode steps that verified nothing
    int64_t plain_steps = 0;
    std::vector<std::vector<TokenId>> outputs;  // of the last round
};

std::vector<std::vector<TokenId>> load_prompts(const SpeculativeBenchOptions& opts,
                                               const Model& model, const std::string& workload) {
    std::ifstream file(opts.prompts_file);
    if (!file) throw Error(fmt::format("bench speculative: cannot read {}", opts.prompts_file));
    nlohmann::json all;
    try {
        all = nlohmann::json::parse(file);
    } catch (const nlohmann::json::exception& e) {
        throw Error(
            fmt::format("bench speculative: {} is not JSON: {}", opts.prompts_file, e.what()));
    }
    if (!all.contains(workload) || !all[workload].is_array() || all[workload].empty()) {
        throw Error(fmt::format("bench speculative: {} has no prompt list '{}'", opts.prompts_file,
                                workload));
    }
    std::vector<std::vector<TokenId>> prompts;
    const RequestBuilder builder(model);  // each prompt a chat turn, as the server builds it
    for (const nlohmann::json& text : all[workload]) {
        if (!text.is_string()) throw Error("bench speculative: prompts must be strings");
        RequestSpec spec;
        spec.kind = RequestSpec::PromptKind::kChat;
        spec.messages = {{"user", text.get<std::string>()}};
        prompts.push_back(builder.prompt_of(spec));
        if (opts.num_prompts > 0 && int64_t(prompts.size()) == opts.num_prompts) break;
    }
    return prompts;
}

// Runs `prompts` through a fresh engine, `batch` at a time, and adds the
// round's figures to `arm`.
void run_arm(Arm& arm, const SpeculativeBenchOptions& opts, const Model& model, ModelRunner& runner,
             Drafter* drafter, const std::vector<std::vector<TokenId>>& prompts,
             int64_t num_blocks) {
    EngineConfig config;
    config.num_kv_blocks = num_blocks;
    config.prefix_cache = PrefixCacheKind::kNone;  // every arm and round computes every prompt
    Engine engine(model, runner, config);
    if (drafter != nullptr) engine.add_drafter(arm.drafter, *drafter);
    SamplingParams params;
    params.max_tokens = opts.max_tokens;
    params.num_speculative_tokens = arm.k;
    params.drafter = arm.drafter;

    std::map<int64_t, std::vector<TokenId>> outputs;
    double decode_ms = 0;
    int64_t decode_tokens = 0;
    for (size_t first = 0; first < prompts.size(); first += size_t(opts.batch)) {
        const size_t last = std::min(prompts.size(), first + size_t(opts.batch));
        for (size_t i = first; i < last; ++i) engine.add_request(prompts[i], params);
        while (engine.has_unfinished()) {
            const auto start = std::chrono::steady_clock::now();
            StepOutput out = engine.step();
            const double step_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count();
            for (FinishedRequest& f : out.finished) {
                outputs[f.request_id] = f.result.tokens;
                const SpeculativeStats& s = f.result.speculative;
                arm.stats.verify_passes += s.verify_passes;
                arm.stats.drafted_tokens += s.drafted_tokens;
                arm.stats.accepted_tokens += s.accepted_tokens;
                arm.stats.rejections += s.rejections;
            }
            if (out.num_prefill_tokens > 0) continue;  // prefill is the same in every arm
            decode_ms += step_ms;
            decode_tokens += int64_t(out.tokens.size());
            if (out.num_drafted_tokens > 0) {
                arm.verify_step_ms += step_ms - out.draft_ms;
                arm.draft_ms += out.draft_ms;
                ++arm.verify_steps;
            } else {
                arm.plain_step_ms += step_ms;
                ++arm.plain_steps;
            }
        }
    }
    arm.decode_ms.push_back(decode_ms);
    arm.decode_tokens.push_back(decode_tokens);
    arm.outputs.clear();
    for (auto& [id, tokens] : outputs) arm.outputs.push_back(std::move(tokens));
}

nlohmann::json report_arm(const Arm& arm, const Arm& plain) {
    const SpeculativeStats& s = arm.stats;
    const double alpha = s.acceptance_rate();
    const double k = double(arm.k);
    const double expected =
        alpha < 1.0 ? (1.0 - std::pow(alpha, k + 1.0)) / (1.0 - alpha) : k + 1.0;
    const double plain_step_ms =
        plain.plain_step_ms / double(std::max<int64_t>(1, plain.plain_steps));
    const double verify_cost =
        arm.verify_steps > 0 ? arm.verify_step_ms / double(arm.verify_steps) / plain_step_ms : 0.0;
    const double draft_cost =
        arm.verify_steps > 0 ? arm.draft_ms / double(arm.verify_steps) / plain_step_ms : 0.0;
    std::vector<double> ratios;
    for (size_t r = 0; r < arm.decode_ms.size(); ++r) {
        const double plain_rate = double(plain.decode_tokens[r]) / plain.decode_ms[r];
        const double rate = double(arm.decode_tokens[r]) / arm.decode_ms[r];
        ratios.push_back(rate / plain_rate);
    }
    std::vector<double> rates;
    for (size_t r = 0; r < arm.decode_ms.size(); ++r) {
        rates.push_back(1000.0 * double(arm.decode_tokens[r]) / arm.decode_ms[r]);
    }
    const double tokens_per_pass = s.tokens_per_pass();
    const int64_t steps = arm.verify_steps + arm.plain_steps;
    const double verifying = steps > 0 ? double(arm.verify_steps) / double(steps) : 0.0;
    return {
        {"drafter", arm.drafter.empty() ? "none" : arm.drafter},
        {"k", arm.k},
        {"acceptance_rate", alpha},
        {"tokens_per_pass", tokens_per_pass},
        {"expected_tokens_per_pass", expected},
        {"drafted_tokens", s.drafted_tokens},
        {"accepted_tokens", s.accepted_tokens},
        {"verify_passes", s.verify_passes},
        {"share_of_steps_verifying", verifying},
        {"verify_cost", verify_cost},
        {"draft_cost", draft_cost},
        {"plain_step_ms", plain_step_ms},
        {"decode_tokens_per_s", percentile(rates, 50)},
        {"speedup", arm.k == 0 ? 1.0 : percentile(ratios, 50)},
        {"predicted_speedup", arm.k == 0 || verify_cost + draft_cost == 0
                                  ? 1.0
                                  : tokens_per_pass / (verify_cost + draft_cost)},
        // Over every decode step: a share of them verify, the rest decode
        // one token at cost 1 (no n-gram match, or the budget left no slot).
        {"predicted_speedup_all_steps",
         arm.k == 0 ? 1.0
                    : (verifying * tokens_per_pass + (1.0 - verifying)) /
                          (verifying * (verify_cost + draft_cost) + (1.0 - verifying))},
    };
}

// The model drafters the --drafters list names, loaded once for every arm
// ("ngram" is the engine's own and needs none).
struct SpeculativeDrafters {
    std::unique_ptr<Model> draft_model;
    std::map<std::string, std::unique_ptr<ModelDrafter>> by_name;
    std::string early_exit_note;  // "L of N layers"

    Drafter* find(const std::string& name) const {
        const auto found = by_name.find(name);
        return found == by_name.end() ? nullptr : found->second.get();
    }
};

SpeculativeDrafters load_speculative_drafters(const SpeculativeBenchOptions& opts,
                                              const Model& model, int64_t num_blocks,
                                              int64_t block_size, const RunnerOptions& runner) {
    SpeculativeDrafters loaded;
    for (const std::string& name : opts.drafters) {
        if (name == "early-exit") {
            SpeculationOptions s;
            s.early_exit_layers = opts.early_exit_layers;
            const int64_t layers = s.exit_layer(model.config.num_layers);
            loaded.by_name[name] =
                ModelDrafter::early_exit(model, layers, num_blocks, block_size, runner);
            loaded.early_exit_note =
                fmt::format("{} of {} layers", layers, model.config.num_layers);
        } else if (name == "draft-model") {
            if (opts.draft_model_path.empty()) {
                throw Error("bench speculative: the draft-model drafter needs --draft-model PATH");
            }
            loaded.draft_model = std::make_unique<Model>(Model::load(opts.draft_model_path));
            loaded.by_name[name] = ModelDrafter::draft_model(*loaded.draft_model, model, num_blocks,
                                                             block_size, runner);
        } else if (name != "ngram") {
            throw Error(
                fmt::format("bench speculative: unknown drafter '{}' (ngram, early-exit, "
                            "draft-model)",
                            name));
        }
    }
    return loaded;
}

// One workload's arms (plain, then each drafter at each K), interleaved
// round by round; appends a report row per arm to `results`.
void run_workload(const SpeculativeBenchOptions& opts, const std::string& workload,
                  const Model& model, ModelRunner& runner, const SpeculativeDrafters& drafters,
                  const std::vector<std::vector<TokenId>>& prompts, int64_t num_blocks,
                  nlohmann::json& results) {
    std::vector<Arm> arms = {Arm{}};
    for (const std::string& name : opts.drafters) {
        for (int32_t k : opts.ks) {
            Arm arm;
            arm.drafter = name;
            arm.k = k;
            arms.push_back(arm);
        }
    }
    for (int round = 0; round < opts.repeat.repeats; ++round) {
        for (size_t a = 0; a < arms.size(); ++a) {
            spdlog::info("{}: round {}/{}, {} K={}", workload, round + 1, opts.repeat.repeats,
                         arms[a].k == 0 ? "plain" : arms[a].drafter, arms[a].k);
            run_arm(arms[a], opts, model, runner, drafters.find(arms[a].drafter), prompts,
                    num_blocks);
            if (arms[a].outputs != arms[0].outputs) {
                throw Error(
                    fmt::format("bench speculative: {} at K={} changed the greedy output: a bug",
                                arms[a].drafter, arms[a].k));
            }
        }
    }
    for (const Arm& arm : arms) {
        nlohmann::json row = report_arm(arm, arms[0]);
        row["workload"] = workload;
        results.push_back(row);
    }
}

void print_speculative_table(const SpeculativeBenchOptions& opts, const Model& model,
                             const nlohmann::json& results) {
    std::printf("%s, greedy, %d tokens per prompt, batch %lld, %d threads, median of %d rounds\n",
                model.config.name.c_str(), opts.max_tokens, (long long)opts.batch,
                omp_get_max_threads(), opts.repeat.repeats);
    std::printf("%-11s %-12s %3s %6s %9s %8s %8s %8s %9s %8s %9s\n", "workload", "drafter", "K",
                "alpha", "tok/pass", "formula", "verify", "draft", "tok/s", "speedup", "predicted");
    for (const nlohmann::json& r : results) {
        std::printf("%-11s %-12s %3d %6.2f %9.2f %8.2f %8.2f %8.2f %9.1f %7.2fx %8.2fx\n",
                    r["workload"].get<std::string>().c_str(),
                    r["drafter"].get<std::string>().c_str(), r["k"].get<int>(),
                    r["acceptance_rate"].get<double>(), r["tokens_per_pass"].get<double>(),
                    r["expected_tokens_per_pass"].get<double>(), r["verify_cost"].get<double>(),
                    r["draft_cost"].get<double>(), r["decode_tokens_per_s"].get<double>(),
                    r["speedup"].get<double>(), r["predicted_speedup_all_steps"].get<double>());
    }
    std::printf(
        "verify / draft: a verification pass's and the drafter's time per pass, in plain decode "
        "steps;\nformula: (1 - alpha^(K+1)) / (1 - alpha); predicted: (f tok/pass + 1 - f) / "
        "(f (verify + draft) + 1 - f),\nf the share of decode steps that verified anything. "
        "(--json for every figure)\n");
}

void check_speculative_lists(const SpeculativeBenchOptions& opts) {
    if (opts.ks.empty() || opts.drafters.empty() || opts.workloads.empty()) {
        throw Error("bench speculative: --k, --drafters and --workloads need at least one value");
    }
    for (int32_t k : opts.ks) {
        if (k < 1 || k > kMaxSpeculativeTokens) {
            throw Error(fmt::format("bench speculative: K = {} is outside 1..{}", k,
                                    kMaxSpeculativeTokens));
        }
    }
}

void run_bench_speculative(const SpeculativeBenchOptions& opts) {
    check_speculative_lists(opts);
    const Model model = opts.model.load();
    ModelRunner runner(model.config, model.weights, opts.model.runner_options());
    std::vector<std::vector<std::vector<TokenId>>> prompt_sets;
    int64_t longest = 0;
    for (const std::string& workload : opts.workloads) {
        prompt_sets.push_back(load_prompts(opts, model, workload));
        for (const auto& p : prompt_sets.back()) longest = std::max(longest, int64_t(p.size()));
    }
    if (longest + opts.max_tokens + kMaxSpeculativeTokens > model.config.context_length) {
        throw Error("bench speculative: the prompts and --max-tokens exceed the context length");
    }
    const int64_t block_size = 16;
    const int64_t num_blocks =
        opts.batch * ((longest + opts.max_tokens + kMaxSpeculativeTokens) / block_size + 2);
    const SpeculativeDrafters drafters =
        load_speculative_drafters(opts, model, num_blocks, block_size, runner.options());
    nlohmann::json results = nlohmann::json::array();
    for (size_t w = 0; w < opts.workloads.size(); ++w) {
        run_workload(opts, opts.workloads[w], model, runner, drafters, prompt_sets[w], num_blocks,
                     results);
    }
    if (!opts.output.json) {
        print_speculative_table(opts, model, results);
        return;
    }
    print_json({
        {"model", model.config.name},
        {"early_exit", drafters.early_exit_note},
        {"draft_model", drafters.draft_model ? drafters.draft_model->config.name : ""},
        {"max_tokens", opts.max_tokens},
        {"batch", opts.batch},
        {"repeats", opts.repeat.repeats},
        {"cpu", cpu_model_name()},
        {"threads", omp_get_max_threads()},
        {"date", utc_date()},
        {"results", results},
    });
}

}  // namespace

void add_bench_speculative(CLI::App& bench) {
    auto opts = std::make_shared<SpeculativeBenchOptions>();
    CLI::App* cmd = bench.add_subcommand(
        "speculative", "speculative decoding against plain decoding, per drafter and K (Lab 6)");
    opts->model.add_to(*cmd);
    cmd->add_option("--prompts", opts->prompts_file, "JSON file of prompt lists by workload")
        ->capture_default_str();
    cmd->add_option("--workloads", opts->workloads, "prompt lists to run (repetitive, open)")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--drafters", opts->drafters, "ngram, early-exit, draft-model")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--k", opts->ks, "drafted tokens per pass to try")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--early-exit-layers", opts->early_exit_layers,
                    "early-exit drafter depth (default: a quarter of the layers)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd->add_option("--draft-model", opts->draft_model_path, "GGUF of the draft-model drafter");
    cmd->add_option("--max-tokens", opts->max_tokens, "generated tokens per prompt")
        ->check(CLI::Range(2, 4096))
        ->capture_default_str();
    cmd->add_option("--num-prompts", opts->num_prompts, "first N prompts of each list (0: all)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
        ->capture_default_str();
    cmd->add_option("--batch", opts->batch, "prompts decoded together")
        ->check(CLI::Range(int64_t(1), int64_t(256)))
        ->capture_default_str();
    opts->repeat.add_to(*cmd, "interleaved rounds (medians)", 100);
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_bench_speculative(*opts); });
}

}  // namespace servelab::cli
