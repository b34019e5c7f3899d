// cmd_generate.cpp — `servelab generate`: one prompt in, generated text out.
//
// Part of the CLI (Labs 1-4). Text is streamed to stdout as it is decoded; with
// --json nothing is streamed and one JSON object is printed at the end with
// the text, the token ids and the timings. -n N asks for N completions of the
// prompt (parallel sampling: completion i uses seed + i; on the paged cache
// they share the prompt's KV blocks, Lab 4); they are printed one after another.
// --tp N splits the model over N ranks (Lab 7, tensor_parallel_ranks.h):
// every rank generates, rank 0 prints, and --json adds what the ranks'
// collectives moved next to what the cost model predicts.
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/common/error.h"
#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/constraint_options.h"
#include "reference/cli/tensor_parallel_ranks.h"
#include "reference/engine/generator.h"
#include "reference/engine/request_builder.h"

namespace servelab::cli {
namespace {

nlohmann::json result_to_json(const GenerationResult& result) {
    const double decode_ms = result.timings.total_ms - result.timings.first_step_ms;
    const size_t decode_tokens = result.tokens.size() - 1;
    return {
        {"text", result.text},
        {"prompt_tokens", result.prompt_tokens},
        {"tokens", result.tokens},
        {"finish_reason", finish_reason_name(result.finish_reason)},
        {"cached_prompt_tokens", result.cached_prompt_tokens},
        {"num_preemptions", result.num_preemptions},
        {"speculative",
         {{"verify_passes", result.speculative.verify_passes},
          {"drafted_tokens", result.speculative.drafted_tokens},
          {"accepted_tokens", result.speculative.accepted_tokens},
          {"acceptance_rate", result.speculative.acceptance_rate()},
          {"tokens_per_pass", result.speculative.tokens_per_pass()}}},
        {"timings",
         {{"time_to_first_token_ms", result.timings.first_step_ms},
          {"total_ms", result.timings.total_ms},
          {"decode_tokens_per_s", decode_tokens > 0 ? 1000.0 * decode_tokens / decode_ms : 0.0},
          {"step_latency_ms", result.timings.step_latency_ms}}},
    };
}

// What the ranks' collectives moved during the generation, and what the
// cost model says they should have (tensor_parallel.h): the check that
// the counters count what the formula assumes.
nlohmann::json tensor_parallel_report(const RankContext& rank, const CommStats& before,
                                      const ModelConfig& config, int64_t tokens_computed,
                                      int64_t logit_rows) {
    const CommStats& after = rank.comm.stats();
    return {
        {"size", rank.shard.num_ranks},
        {"backend", rank.comm.backend()},
        {"tokens_computed", tokens_computed},
        {"logit_rows", logit_rows},
        {"all_reduce_calls", after.all_reduce_calls - before.all_reduce_calls},
        {"all_reduce_bytes", after.all_reduce_bytes - before.all_reduce_bytes},
        {"all_reduce_bytes_formula",
         rank.shard.num_ranks > 1 ? all_reduce_bytes_per_step(config, tokens_computed) : 0},
        {"all_gather_bytes", after.all_gather_bytes - before.all_gather_bytes},
        {"all_gather_bytes_formula",
         rank.shard.num_ranks > 1 ? head_gather_bytes_per_step(config, logit_rows) : 0},
        {"all_reduce_ms", 1e-6 * double(after.all_reduce_ns - before.all_reduce_ns)},
        {"all_gather_ms", 1e-6 * double(after.all_gather_ns - before.all_gather_ns)},
    };
}

struct GenerateOptions {
    ModelOptions model;
    SamplingOptions sampling;
    ConstraintOptions constraint;
    CacheOptions cache;
    SpeculationOptions speculation;
    TensorParallelOptions tp;
    std::string prompt;
    std::string tokens;
    int num_completions = 1;
    bool chat = false;
    OutputOptions output;
};

// The request through the one front door (request_builder.h), as the server builds it.
EngineRequest request_of(const GenerateOptions& opts, const SamplingParams& params,
                         const Model& model) {
    RequestSpec spec;
    if (!opts.tokens.empty()) {
        spec.kind = RequestSpec::PromptKind::kTokenIds;
        spec.token_ids = parse_token_list(opts.tokens);
    } else if (opts.chat) {
        spec.kind = RequestSpec::PromptKind::kChat;
        spec.messages = {{"user", opts.prompt}};
    } else {
        spec.text = opts.prompt;
    }
    spec.params = params;
    spec.max_tokens_given = false;  // generation stops at the context's end, as it always has
    spec.num_completions = opts.num_completions;
    spec.constraint = opts.constraint.spec();
    return RequestBuilder(model).build(spec);
}

// The whole command on one rank (every rank generates; rank 0 reports).
void generate_on_rank(const GenerateOptions& opts, const SamplingParams& params,
                      RankContext& rank) {
    const Model& model = rank.model;
    const EngineRequest request = request_of(opts, params, model);
    CliGenerator generator(opts.cache, model, rank.runner, {}, opts.speculation,
                           rank.talks_to_user());
    const bool stream_text = !opts.output.json && opts.num_completions == 1 && rank.talks_to_user();
    TokenCallback stream;
    if (stream_text) {
        stream = [](TokenId, const std::string& piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        };
    }
    const CommStats before = rank.comm.stats();
    const int64_t tokens_before = rank.runner.num_tokens_computed();
    const int64_t rows_before = rank.runner.num_logit_rows_computed();
    const std::vector<GenerationResult> results =
        generator.generate(request.prompt, request.params, request.num_completions, stream);
    if (!rank.talks_to_user()) return;
    if (opts.output.json) {
        nlohmann::json report = result_to_json(results[0]);
        if (results.size() > 1) {
            report["choices"] = nlohmann::json::array();
            for (const GenerationResult& result : results) {
                report["choices"].push_back(result_to_json(result));
            }
        }
        report["tensor_parallel"] = tensor_parallel_report(
            rank, before, model.config, rank.runner.num_tokens_computed() - tokens_before,
            rank.runner.num_logit_rows_computed() - rows_before);
        print_json(report);
        return;
    }
    if (!stream_text) {
        for (size_t i = 0; i < results.size(); ++i) {
            std::printf("--- completion %zu ---\n%s\n", i, results[i].text.c_str());
        }
    } else {
        std::printf("\n");
    }
    const GenerationResult& first = results[0];
    spdlog::info(
        "{} prompt tokens ({} from the prefix cache) + {} generated, first token {:.0f} "
        "ms, {:.2f} tok/s, finish: {}",
        first.prompt_tokens.size(), first.cached_prompt_tokens, first.tokens.size(),
        first.timings.first_step_ms, 1000.0 * double(first.tokens.size()) / first.timings.total_ms,
        finish_reason_name(first.finish_reason));
}

void run_generate(const GenerateOptions& opts) {
    if (opts.prompt.empty() && opts.tokens.empty()) {
        throw Error("generate: give --prompt or --tokens");
    }
    const SamplingParams params = opts.sampling.resolve();
    run_on_ranks(opts.tp, opts.model, opts.cache.mla_mode(),
                 [&opts, &params](RankContext& rank) { generate_on_rank(opts, params, rank); });
}

}  // namespace

void add_generate(CLI::App& app) {
    auto opts = std::make_shared<GenerateOptions>();
    CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
    opts->model.add_to(*cmd);
    opts->sampling.add_to(*cmd);
    opts->constraint.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->speculation.add_to(*cmd);
    opts->tp.add_to(*cmd);
    auto* prompt = cmd->add_option("-p,--prompt", opts->prompt, "prompt text");
    auto* tokens = cmd->add_option("--tokens", opts->tokens, "prompt as comma-separated token ids");
    prompt->excludes(tokens);
    cmd->add_option("-n,--n", opts->num_completions,
                    "completions of the prompt (parallel sampling)")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd->add_flag("--chat", opts->chat,
                  "wrap the prompt as one user turn of the model's chat template");
    opts->output.add_to(*cmd, "print one JSON object: text, token ids, timings");
    cmd->callback([opts] { run_generate(*opts); });
}

}  // namespace servelab::cli
