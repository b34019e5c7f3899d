// cmd_perplexity.cpp — `servelab perplexity`: a model's perplexity on a text, and its KL from a
// reference model.
//
// Part of the CLI (Lab 10, weight quantization; chapter 11.7 GPTQ and AWQ;
// 11.8 what quantization costs; docs/perplexity.md).
//   servelab perplexity -m Q.gguf --text data/text/kjv_evaluation.txt -c 512
//   servelab perplexity -m Q.gguf --text data/text/kjv_evaluation.txt --kl-against SRC.gguf
// The scheme is llama-perplexity's (reference/eval/perplexity.h), so the
// figures compare with llama.cpp's. Progress goes to stderr; the result (or,
// with --json, one JSON object) to stdout.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/stage_progress.h"
#include "reference/eval/perplexity.h"

namespace servelab::cli {
namespace {

struct PerplexityOptions {
    ModelOptions model;
    std::string text_path;
    int64_t context_tokens = 512;
    int64_t stride_tokens = 0;  // 0: the context (non-overlapping windows)
    int64_t max_windows = 0;    // 0: every window that fits
    std::string reference_path;
    OutputOptions output;
};

std::string read_text(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw Error(fmt::format("perplexity: cannot read '{}'", path));
    std::ostringstream text;
    text << file.rdbuf();
    if (text.str().empty()) throw Error(fmt::format("perplexity: '{}' is empty", path));
    return text.str();
}

// KL and top-1 agreement compare distributions token by token: the two
// models must mean the same thing by every id.
void check_same_vocabulary(const Model& model, const Model& reference,
                           const std::string& reference_path) {
    const Tokenizer& a = model.tokenizer;
    const Tokenizer& b = reference.tokenizer;
    bool same =
        model.config.vocab_size == reference.config.vocab_size && a.vocab_size() == b.vocab_size();
    for (TokenId id = 0; same && id < a.vocab_size(); ++id) {
        same = a.token_text(id) == b.token_text(id);
    }
    if (!same) {
        throw Error(fmt::format(
            "perplexity: --kl-against '{}' has a different vocabulary ({} tokens) from the "
            "model's ({} tokens); KL needs the same one",
            reference_path, reference.config.vocab_size, model.config.vocab_size));
    }
}

nlohmann::json scores_json(const NllSum& nll) {
    return {{"perplexity", nll.perplexity()},
            {"perplexity_stderr", nll.perplexity_stderr()},
            {"mean_nll_nats", nll.mean_nats()}};
}

// The model under test and, with --kl-against, the reference it is compared with.
struct PerplexityModels {
    Model model;
    std::optional<Model> reference;
};

PerplexityModels load_perplexity_models(const PerplexityOptions& opts) {
    PerplexityModels models{opts.model.load(), std::nullopt};
    if (!opts.reference_path.empty()) {
        ModelOptions reference_options = opts.model;
        reference_options.path = opts.reference_path;
        models.reference.emplace(reference_options.load());
        check_same_vocabulary(models.model, *models.reference, opts.reference_path);
    }
    if (opts.context_tokens > models.model.config.context_length) {
        throw Error(fmt::format("perplexity: --context {} is longer than the model's context, {}",
                                opts.context_tokens, models.model.config.context_length));
    }
    return models;
}

// What one scoring run measured, for the report.
struct PerplexityRun {
    size_t text_tokens = 0;
    PerplexityWindowPlan plan;
    bool window_starts_with_bos = false;
    double tokenize_s = 0;
    double score_s = 0;
    PerplexityScores scores;

    double tokens_per_second() const {
        return double(int64_t(plan.windows.size()) * plan.context_tokens) / score_s;
    }
};

PerplexityRun score_perplexity(const PerplexityOptions& opts, const std::string& text,
                               const PerplexityModels& models) {
    const Model& model = models.model;
    const std::optional<Model>& reference = models.reference;
    PerplexityRun run;
    const auto tokenize_start = std::chrono::steady_clock::now();
    const std::vector<TokenId> tokens = perplexity_text_tokens(model, text);
    run.tokenize_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - tokenize_start).count();
    run.text_tokens = tokens.size();
    run.plan = plan_perplexity_windows(int64_t(tokens.size()), opts.context_tokens,
                                       opts.stride_tokens, opts.max_windows);
    const PerplexityWindowPlan& plan = run.plan;
    const TokenId window_bos = perplexity_window_bos(model.tokenizer);
    run.window_starts_with_bos = window_bos >= 0;
    spdlog::info("{} tokens in {:.1f} s; {} windows of {} tokens, stride {}, {} predictions scored",
                 tokens.size(), run.tokenize_s, plan.windows.size(), plan.context_tokens,
                 plan.stride_tokens, plan.num_scored_total());
    ModelRunner runner(model.config, model.weights, opts.model.runner_options());
    std::unique_ptr<ModelRunner> reference_runner;
    if (reference)
        reference_runner = std::make_unique<ModelRunner>(reference->config, reference->weights,
                                                         opts.model.runner_options());
    StageProgress progress("perplexity", spdlog::get_level() <= spdlog::level::info);
    const auto start = std::chrono::steady_clock::now();
    run.scores = score_windows(
        runner, reference_runner.get(), tokens, plan, window_bos,
        [&progress](int64_t done, int64_t total) { progress.update("windows", done, total); });
    run.score_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return run;
}

nlohmann::json perplexity_report(const PerplexityOptions& opts, const PerplexityRun& run,
                                 bool with_reference) {
    const PerplexityScores& scores = run.scores;
    nlohmann::json report = scores_json(scores.nll);
    report["model"] = opts.model.path;
    report["text"] = opts.text_path;
    report["cpu_kernels"] = opts.model.cpu_kernels;
    report["text_tokens"] = run.text_tokens;
    report["context_tokens"] = run.plan.context_tokens;
    report["stride_tokens"] = run.plan.stride_tokens;
    report["windows"] = run.plan.windows.size();
    report["scored_tokens"] = scores.nll.count;
    report["window_starts_with_bos"] = run.window_starts_with_bos;
    report["tokenize_seconds"] = run.tokenize_s;
    report["seconds"] = run.score_s;
    report["tokens_per_second"] = run.tokens_per_second();
    if (with_reference) {
        report["reference"] = scores_json(scores.reference_nll);
        report["reference"]["model"] = opts.reference_path;
        report["kl"] = {{"mean_nats", scores.kl.mean_nats()},
                        {"median_nats", scores.kl.median_nats()},
                        {"p99_nats", scores.kl.p99_nats()},
                        {"max_nats", scores.kl.max_nats()},
                        {"top1_agreement", scores.kl.top1_agreement()}};
    }
    return report;
}

void print_perplexity(const PerplexityOptions& opts, const PerplexityRun& run,
                      bool with_reference) {
    const PerplexityScores& scores = run.scores;
    std::printf(
        "PPL = %.4f +/- %.5f  (%lld predictions scored, %zu windows of %lld, %.1f s, "
        "%.0f tokens/s)\n",
        scores.nll.perplexity(), scores.nll.perplexity_stderr(), (long long)scores.nll.count,
        run.plan.windows.size(), (long long)run.plan.context_tokens, run.score_s,
        run.tokens_per_second());
    if (!with_reference) return;
    std::printf("reference PPL = %.4f +/- %.5f  (%s)\n", scores.reference_nll.perplexity(),
                scores.reference_nll.perplexity_stderr(), opts.reference_path.c_str());
    std::printf("KL(reference || model), nats: mean %.6f  median %.6f  p99 %.6f  max %.6f\n",
                scores.kl.mean_nats(), scores.kl.median_nats(), scores.kl.p99_nats(),
                scores.kl.max_nats());
    std::printf("same top-1 token: %.2f %%\n", 100.0 * scores.kl.top1_agreement());
}

void run_perplexity(const PerplexityOptions& opts) {
    const std::string text = read_text(opts.text_path);
    const PerplexityModels models = load_perplexity_models(opts);
    const PerplexityRun run = score_perplexity(opts, text, models);
    const bool with_reference = models.reference.has_value();
    if (opts.output.json) {
        print_json(perplexity_report(opts, run, with_reference));
    } else {
        print_perplexity(opts, run, with_reference);
    }
}

}  // namespace

void add_perplexity(CLI::App& app) {
    auto opts = std::make_shared<PerplexityOptions>();
    CLI::App* cmd = app.add_subcommand(
        "perplexity", "perplexity of a model on a text, and its KL from a reference (Lab 10)");
    opts->model.add_to(*cmd);
    cmd->add_option("--text", opts->text_path,
                    "the text to score (UTF-8), e.g. "
                    "data/text/kjv_evaluation.txt")
        ->required();
    cmd->add_option("-c,--context", opts->context_tokens, "tokens per window (N)")
        ->capture_default_str();
    cmd->add_option("--stride", opts->stride_tokens,
                    "tokens between window starts (S); 0 = the context: non-overlapping "
                    "windows scoring their second half, as llama-perplexity does")
        ->capture_default_str();
    cmd->add_option("--chunks", opts->max_windows, "windows to score (0 = all that fit)")
        ->capture_default_str();
    cmd->add_option("--kl-against", opts->reference_path,
                    "reference model (e.g. the unquantized one): also report KL(P_ref || P) "
                    "per token and top-1 agreement");
    opts->output.add_to(*cmd);
    cmd->callback([opts] { run_perplexity(*opts); });
}

}  // namespace servelab::cli
