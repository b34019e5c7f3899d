// cmd_chat.cpp — `servelab chat`: an interactive conversation.
//
// Part of the CLI (Lab 1). Each turn re-renders the whole conversation with
// the model's chat template (through the one front door, request_builder.h,
// as the server does) and generates the assistant's reply, streamed as it is decoded.
// With --message, that message is the first turn; further turns are read
// from stdin, one line each (so `make run` answers its fixed question and
// then, in a terminal, keeps chatting). An empty line, "exit" or end of
// input ends the chat. On the paged cache (Lab 4) the conversation so far is
// found in the prefix cache at each turn, so only the new turn is computed.
// With --tp N (Lab 7) every rank of the split model runs the conversation;
// rank 0 reads each line and hands it to the others (a broadcast), and only
// rank 0 prints.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "reference/chat/chat_format.h"
#include "reference/cli/cli_generator.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/cli/constraint_options.h"
#include "reference/cli/tensor_parallel_ranks.h"
#include "reference/engine/generator.h"
#include "reference/engine/request_builder.h"

namespace servelab::cli {
namespace {

struct ChatOptions {
    ModelOptions model;
    SamplingOptions sampling;
    ConstraintOptions constraint;
    CacheOptions cache;
    SpeculationOptions speculation;
    TensorParallelOptions tp;
    std::string system;  // empty: the chat template's own default, if it has one
    std::string message;
};

std::string reply(const RequestBuilder& builder, CliGenerator& generator,
                  const SamplingParams& params, const ConstraintSpec& constraint,
                  const std::vector<ChatMessage>& conversation, bool print) {
    // The conversation through the one front door (request_builder.h), as
    // the server's /v1/chat/completions builds it.
    RequestSpec spec;
    spec.kind = RequestSpec::PromptKind::kChat;
    spec.messages = conversation;
    spec.params = params;
    spec.max_tokens_given = false;
    spec.constraint = constraint;  // every reply matches it
    const EngineRequest request = builder.build(spec);
    const std::vector<TokenId>& prompt_ids = request.prompt;
    TokenCallback stream;
    if (print) {
        stream = [](TokenId, const std::string& piece) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        };
    }
    const GenerationResult result = generator.generate(prompt_ids, request.params, 1, stream).at(0);
    if (!print) return result.text;
    std::printf("\n");
    spdlog::debug(
        "{} prompt tokens ({} from the prefix cache), {} generated, {:.2f} tok/s, "
        "finish: {}",
        prompt_ids.size(), result.cached_prompt_tokens, result.tokens.size(),
        1000.0 * double(result.tokens.size()) / result.timings.total_ms,
        finish_reason_name(result.finish_reason));
    return result.text;
}

// Rank 0 reads the next user line (or the first --message); every rank gets
// it. Empty: the chat is over.
std::string next_user_line(const ChatOptions& opts, RankContext& rank, bool first_turn) {
    std::string line;
    if (rank.talks_to_user()) {
        line = first_turn ? opts.message : std::string();
        if (!line.empty()) {
            std::printf("> %s\n", line.c_str());
        } else {
            if (isatty(STDIN_FILENO) != 0) {
                std::printf("> ");
                std::fflush(stdout);
            }
            if (!std::getline(std::cin, line) || line == "exit") line.clear();
        }
    }
    if (rank.shard.num_ranks == 1) return line;
    std::vector<char> bytes(line.begin(), line.end());
    broadcast_vector(rank.comm, bytes, 0);
    return std::string(bytes.begin(), bytes.end());
}

void chat_on_rank(const ChatOptions& opts, const SamplingParams& params, RankContext& rank) {
    CliGenerator generator(opts.cache, rank.model, rank.runner, {}, opts.speculation,
                           rank.talks_to_user());
    const RequestBuilder builder(rank.model);
    const ConstraintSpec constraint = opts.constraint.spec();
    std::vector<ChatMessage> conversation;
    if (!opts.system.empty()) conversation.push_back({"system", opts.system});
    for (bool first_turn = true;; first_turn = false) {
        const std::string user_text = next_user_line(opts, rank, first_turn);
        if (user_text.empty()) break;
        conversation.push_back({"user", user_text});
        conversation.push_back({"assistant", reply(builder, generator, params, constraint,
                                                   conversation, rank.talks_to_user())});
    }
}

void run_chat(const ChatOptions& opts) {
    const SamplingParams params = opts.sampling.resolve();
    run_on_ranks(opts.tp, opts.model, opts.cache.mla_mode(),
                 [&opts, &params](RankContext& rank) { chat_on_rank(opts, params, rank); });
}

}  // namespace

void add_chat(CLI::App& app) {
    auto opts = std::make_shared<ChatOptions>();
    opts->sampling.params.max_tokens = 256;
    CLI::App* cmd = app.add_subcommand("chat", "chat with the model (its own chat template)");
    opts->model.add_to(*cmd);
    opts->sampling.add_to(*cmd);
    opts->constraint.add_to(*cmd);
    opts->cache.add_to(*cmd);
    opts->speculation.add_to(*cmd);
    cmd->add_option("--system", opts->system,
                    "system prompt (default: the model's chat template's own, if any)");
    cmd->add_option("--message", opts->message, "first user message");
    opts->tp.add_to(*cmd);
    cmd->callback([opts] { run_chat(*opts); });
}

}  // namespace servelab::cli
