// cmd_generate.cpp — `servelab generate`: one prompt in, generated text out.
//
// Part of the CLI (Labs 1-4). Text is streamed to stdout as it is decoded; with
// --json nothing is streamed and one JSON object is printed at the end with
// the text, the token ids and the timings. -n N asks for N completions of the
// prompt (parallel sampling: completion i uses seed + i; on the paged cache
// they share the prompt's KV blocks, Lab 4); they are printed one after another.
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <vector>

#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/common/error.h"
#include "reference/engine/generator.h"
#include "reference/model/chat_format.h"

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

}  // namespace

void add_generate_command(CLI::App& app) {
    struct Options {
        ModelOptions model;
        SamplingOptions sampling;
        CacheOptions cache;
        SpeculationOptions speculation;
        std::string prompt;
        std::string tokens;
        int num_completions = 1;
        bool chat = false;
        bool json = false;
    };
    auto opts = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
    opts->model.add_to(*cmd);
    opts->sampling.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->speculation.add_to(*cmd);
    auto* prompt = cmd->add_option("-p,--prompt", opts->prompt, "prompt text");
    auto* tokens = cmd->add_option("--tokens", opts->tokens, "prompt as comma-separated token ids");
    prompt->excludes(tokens);
    cmd->add_option("-n,--n", opts->num_completions,
                    "completions of the prompt (parallel sampling)")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd->add_flag("--chat", opts->chat, "wrap the prompt as one ChatML user turn");
    cmd->add_flag("--json", opts->json, "print one JSON object: text, token ids, timings");
    cmd->callback([opts] {
        if (opts->prompt.empty() && opts->tokens.empty()) {
            throw Error("generate: give --prompt or --tokens");
        }
        const SamplingParams params = opts->sampling.resolve();
        Model model = opts->model.load();

        std::vector<TokenId> prompt_ids;
        if (!opts->tokens.empty()) {
            prompt_ids = parse_token_list(opts->tokens);
        } else {
            std::string text = opts->prompt;
            if (opts->chat) {
                const std::vector<ChatMessage> messages = {
                    {"system", std::string(kSmolLmDefaultSystemPrompt)}, {"user", opts->prompt}};
                text = format_chatml(messages, /*add_generation_prompt=*/true);
            }
            // Special tokens are parsed only in text servelab formatted itself.
            prompt_ids = model.tokenizer.encode(text, /*parse_special=*/opts->chat);
            if (model.tokenizer.add_bos() && model.tokenizer.bos_id() >= 0) {
                prompt_ids.insert(prompt_ids.begin(), model.tokenizer.bos_id());
            }
        }

        ModelRunner runner(model.config, model.weights, opts->cache.mla_mode());
        CliGenerator generator(opts->cache, model, runner, {}, opts->speculation);
        const bool stream_text = !opts->json && opts->num_completions == 1;
        TokenCallback stream;
        if (stream_text) {
            stream = [](TokenId, const std::string& piece) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
            };
        }
        const std::vector<GenerationResult> results =
            generator.generate(prompt_ids, params, opts->num_completions, stream);
        if (opts->json) {
            nlohmann::json report = result_to_json(results[0]);
            if (results.size() > 1) {
                report["choices"] = nlohmann::json::array();
                for (const GenerationResult& result : results) {
                    report["choices"].push_back(result_to_json(result));
                }
            }
            std::printf("%s\n", report.dump(2).c_str());
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
            first.timings.first_step_ms,
            1000.0 * double(first.tokens.size()) / first.timings.total_ms,
            finish_reason_name(first.finish_reason));
    });
}

}  // namespace servelab::cli
