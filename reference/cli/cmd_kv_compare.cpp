// cmd_kv_compare.cpp — `servelab kv-compare`: the output cost of a KV element type.
//
// Part of the CLI (Lab 3, chapter 11.3 KV-cache quantization). Runs
// measure_kv_quality (reference/engine/kv_quality.h) on each prompt and
// reports teacher-forced argmax agreement, the largest logit error and the
// free-running identical prefix of the candidate cache type against the
// baseline (fp32 by default). Prompts come from -p or from a golden file
// with "prompts": [{"name", "prompt_ids"}] (data/golden/llamacpp_greedy.json).
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/engine/kv_quality.h"

namespace servelab::cli {
namespace {

struct NamedPrompt {
    std::string name;
    std::vector<TokenId> ids;
};

std::vector<NamedPrompt> read_prompts_file(const std::string& path, int64_t max_prompts) {
    std::ifstream in(path);
    if (!in) throw Error(fmt::format("kv-compare: cannot read '{}'", path));
    const nlohmann::json golden = nlohmann::json::parse(in, nullptr, false);
    if (golden.is_discarded() || !golden.contains("prompts") || !golden["prompts"].is_array()) {
        throw Error(fmt::format("kv-compare: '{}' has no \"prompts\" array", path));
    }
    std::vector<NamedPrompt> prompts;
    for (const auto& entry : golden["prompts"]) {
        if (int64_t(prompts.size()) >= max_prompts) break;
        if (!entry.contains("prompt_ids") || !entry["prompt_ids"].is_array()) {
            throw Error(fmt::format("kv-compare: a prompt in '{}' has no prompt_ids", path));
        }
        NamedPrompt prompt{entry.value("name", fmt::format("prompt{}", prompts.size())), {}};
        for (const auto& id : entry["prompt_ids"]) {
            if (!id.is_number_integer()) throw Error("kv-compare: prompt_ids must be integers");
            prompt.ids.push_back(id.get<TokenId>());
        }
        prompts.push_back(std::move(prompt));
    }
    return prompts;
}

nlohmann::json to_json(const KvQuality& q) {
    return {{"compared_steps", q.compared_steps},
            {"argmax_agreements", q.argmax_agreements},
            {"argmax_agreement", double(q.argmax_agreements) / double(q.compared_steps)},
            {"max_abs_logit_error", q.max_abs_logit_error},
            {"max_abs_logit", q.max_abs_logit},
            {"generated_tokens", q.generated_tokens},
            {"identical_prefix", q.identical_prefix}};
}

struct KvCompareOptions {
    ModelOptions model;
    std::string candidate = "int8";
    std::string baseline = "f32";
    std::vector<std::string> prompts;
    std::string prompts_file;
    int64_t max_prompts = 1000;
    int64_t gen_tokens = 32;
    OutputOptions output;
};

// The file's prompts (--prompts-file), then the -p texts, tokenized.
std::vector<NamedPrompt> kv_compare_prompts(const KvCompareOptions& opts, const Model& model) {
    std::vector<NamedPrompt> prompts;
    if (!opts.prompts_file.empty()) {
        prompts = read_prompts_file(opts.prompts_file, opts.max_prompts);
    }
    for (const std::string& text : opts.prompts) {
        prompts.push_back({text, model.tokenizer.encode(text, true)});
    }
    if (prompts.empty()) throw Error("kv-compare: give -p/--prompt or --prompts-file");
    return prompts;
}

void print_kv_comparison(const KvCompareOptions& opts, size_t num_prompts, const KvQuality& total) {
    std::printf(
        "%s vs %s KV cache over %zu prompts x %lld tokens:\n"
        "  teacher-forced argmax agreement: %lld/%lld (%.2f%%)\n"
        "  largest |logit error|:           %.4f (largest |logit| %.2f)\n"
        "  free-running identical tokens:   %lld/%lld\n",
        opts.candidate.c_str(), opts.baseline.c_str(), num_prompts, (long long)opts.gen_tokens,
        (long long)total.argmax_agreements, (long long)total.compared_steps,
        100.0 * double(total.argmax_agreements) / double(total.compared_steps),
        total.max_abs_logit_error, total.max_abs_logit, (long long)total.identical_prefix,
        (long long)total.generated_tokens);
}

void run_kv_compare(const KvCompareOptions& opts) {
    Model model = opts.model.load();
    const std::vector<NamedPrompt> prompts = kv_compare_prompts(opts, model);
    ModelRunner runner(model.config, model.weights, opts.model.runner_options());
    const KvDtype baseline = parse_kv_dtype(opts.baseline);
    const KvDtype candidate = parse_kv_dtype(opts.candidate);
    std::vector<KvQuality> results;
    nlohmann::json per_prompt = nlohmann::json::array();
    for (const NamedPrompt& prompt : prompts) {
        if (prompt.ids.empty()) throw Error("kv-compare: empty prompt '" + prompt.name + "'");
        results.push_back(measure_kv_quality(runner, model.config, model.tokenizer, prompt.ids,
                                             opts.gen_tokens, baseline, candidate));
        const KvQuality& q = results.back();
        spdlog::info("{}: argmax agrees {}/{}, max |dlogit| {:.4f}, identical prefix {}/{}",
                     prompt.name, q.argmax_agreements, q.compared_steps, q.max_abs_logit_error,
                     q.identical_prefix, q.generated_tokens);
        nlohmann::json entry = to_json(q);
        entry["name"] = prompt.name;
        per_prompt.push_back(entry);
    }
    const KvQuality total = combine(results);
    if (!opts.output.json) {
        print_kv_comparison(opts, prompts.size(), total);
        return;
    }
    print_json({{"baseline", opts.baseline},
                {"candidate", opts.candidate},
                {"model", model.config.name},
                {"gen_tokens", opts.gen_tokens},
                {"total", to_json(total)},
                {"prompts", per_prompt}});
}

}  // namespace

void add_kv_compare(CLI::App& app) {
    auto opts = std::make_shared<KvCompareOptions>();
    CLI::App* cmd = app.add_subcommand(
        "kv-compare", "logit error and greedy agreement of a KV cache type vs fp32 (Lab 3)");
    opts->model.add_to(*cmd);
    const auto dtypes = CLI::IsMember({"f32", "f16", "bf16", "int8", "fp8"});
    cmd->add_option("--kv-dtype", opts->candidate, "the cache type to measure")
        ->check(dtypes)
        ->capture_default_str();
    cmd->add_option("--baseline", opts->baseline, "the cache type to compare against")
        ->check(dtypes)
        ->capture_default_str();
    cmd->add_option("-p,--prompt", opts->prompts, "prompt text (repeatable)");
    cmd->add_option("--prompts-file", opts->prompts_file,
                    "JSON with prompts[].prompt_ids, e.g. data/golden/llamacpp_greedy.json");
    cmd->add_option("--max-prompts", opts->max_prompts, "use at most this many file prompts")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd->add_option("--gen-tokens", opts->gen_tokens, "greedy tokens per prompt")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_kv_compare(*opts); });
}

}  // namespace servelab::cli
