// cmd_generate.cpp — `servelab generate`: one prompt in, generated text out.
//
// Part of the CLI (Lab 1). Text is streamed to stdout as it is decoded; with
// --json nothing is streamed and one JSON object is printed at the end with
// the text, the token ids and the timings.
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

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
        std::string prompt;
        std::string tokens;
        bool chat = false;
        bool json = false;
    };
    auto opts = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
    opts->model.add_to(*cmd);
    opts->sampling.add_to(*cmd);
    opts->cache.add_to(*cmd);
    auto* prompt = cmd->add_option("-p,--prompt", opts->prompt, "prompt text");
    auto* tokens = cmd->add_option("--tokens", opts->tokens, "prompt as comma-separated token ids");
    prompt->excludes(tokens);
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
        TokenCallback stream;
        if (!opts->json) {
            stream = [](TokenId, const std::string& piece) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
            };
        }
        const std::unique_ptr<KvCache> cache =
            opts->cache.make(model.config, int64_t(prompt_ids.size()), params.max_tokens);
        const GenerationResult result = generate(runner, model.config, model.tokenizer, prompt_ids,
                                                 params, stream, cache.get());
        if (opts->json) {
            std::printf("%s\n", result_to_json(result).dump(2).c_str());
        } else {
            std::printf("\n");
            spdlog::info(
                "{} prompt + {} generated tokens, first token {:.0f} ms, {:.2f} tok/s, "
                "finish: {}",
                result.prompt_tokens.size(), result.tokens.size(), result.timings.first_step_ms,
                1000.0 * double(result.tokens.size()) / result.timings.total_ms,
                finish_reason_name(result.finish_reason));
        }
    });
}

}  // namespace servelab::cli
