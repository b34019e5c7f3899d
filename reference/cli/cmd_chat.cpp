// cmd_chat.cpp — `servelab chat`: an interactive ChatML conversation.
//
// Part of the CLI (Lab 1). Each turn re-renders the whole conversation as
// ChatML and generates the assistant's reply, streamed as it is decoded.
// With --message, that message is the first turn; further turns are read
// from stdin, one line each (so `make run` answers its fixed question and
// then, in a terminal, keeps chatting). An empty line, "exit" or end of
// input ends the chat. On the paged cache (Lab 4) the conversation so far is
// found in the prefix cache at each turn, so only the new turn is computed.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/engine/generator.h"
#include "reference/model/chat_format.h"

namespace servelab::cli {
namespace {

struct ChatOptions {
    ModelOptions model;
    SamplingOptions sampling;
    CacheOptions cache;
    SpeculationOptions speculation;
    std::string system = std::string(kSmolLmDefaultSystemPrompt);
    std::string message;
};

std::string reply(const Model& model, CliGenerator& generator, const SamplingParams& params,
                  const std::vector<ChatMessage>& conversation) {
    const std::string prompt = format_chatml(conversation, /*add_generation_prompt=*/true);
    const std::vector<TokenId> prompt_ids = model.tokenizer.encode(prompt, true);
    const GenerationResult result =
        generator
            .generate(prompt_ids, params, 1,
                      [](TokenId, const std::string& piece) {
                          std::fwrite(piece.data(), 1, piece.size(), stdout);
                          std::fflush(stdout);
                      })
            .at(0);
    std::printf("\n");
    spdlog::debug(
        "{} prompt tokens ({} from the prefix cache), {} generated, {:.2f} tok/s, "
        "finish: {}",
        prompt_ids.size(), result.cached_prompt_tokens, result.tokens.size(),
        1000.0 * double(result.tokens.size()) / result.timings.total_ms,
        finish_reason_name(result.finish_reason));
    return result.text;
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto opts = std::make_shared<ChatOptions>();
    opts->sampling.params.max_tokens = 256;
    CLI::App* cmd = app.add_subcommand("chat", "chat with the model (ChatML)");
    opts->model.add_to(*cmd);
    opts->sampling.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->speculation.add_to(*cmd);
    cmd->add_option("--system", opts->system, "system prompt")->capture_default_str();
    cmd->add_option("--message", opts->message, "first user message");
    cmd->callback([opts] {
        const SamplingParams params = opts->sampling.resolve();
        Model model = opts->model.load();
        ModelRunner runner(model.config, model.weights, opts->cache.mla_mode());
        CliGenerator generator(opts->cache, model, runner, {}, opts->speculation);
        const bool interactive = isatty(STDIN_FILENO) != 0;

        std::vector<ChatMessage> conversation;
        if (!opts->system.empty()) conversation.push_back({"system", opts->system});
        std::string user_text = opts->message;
        if (!user_text.empty()) std::printf("> %s\n", user_text.c_str());
        while (true) {
            if (user_text.empty()) {
                if (interactive) {
                    std::printf("> ");
                    std::fflush(stdout);
                }
                if (!std::getline(std::cin, user_text) || user_text.empty() ||
                    user_text == "exit") {
                    break;
                }
            }
            conversation.push_back({"user", user_text});
            conversation.push_back({"assistant", reply(model, generator, params, conversation)});
            user_text.clear();
        }
    });
}

}  // namespace servelab::cli
