// cmd_logits.cpp — `servelab logits`: the logits of every prompt position, raw.
//
// Part of the CLI (test tooling). Writes little-endian float32, row-major
// (num_tokens, vocab_size), for comparison with independent implementations
// (tests/e2e/test_numpy_oracle.py).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "kernels/common/error.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/engine/model_runner.h"

namespace servelab::cli {
namespace {

struct LogitsOptions {
    ModelOptions model;
    std::string tokens;
    std::string prompt;
    std::string out;
};

void run_logits(const LogitsOptions& opts) {
    if (opts.tokens.empty() && opts.prompt.empty()) {
        throw Error("logits: give --tokens or --prompt");
    }
    Model model = opts.model.load();
    const std::vector<TokenId> ids = opts.tokens.empty() ? model.tokenizer.encode(opts.prompt, true)
                                                         : parse_token_list(opts.tokens);
    ModelRunner runner(model.config, model.weights, opts.model.runner_options());
    const std::vector<float> logits = runner.forward({ids, 0, LogitsFor::kAllTokens});
    FILE* f = std::fopen(opts.out.c_str(), "wb");
    if (f == nullptr) throw Error(fmt::format("cannot write '{}'", opts.out));
    const size_t written = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
    const bool closed = std::fclose(f) == 0;
    if (written != logits.size() || !closed) {
        throw Error(fmt::format("cannot write '{}'", opts.out));
    }
    spdlog::info("wrote {} x {} logits to {}", ids.size(), model.config.vocab_size, opts.out);
}

}  // namespace

void add_logits(CLI::App& app) {
    auto opts = std::make_shared<LogitsOptions>();
    CLI::App* cmd = app.add_subcommand("logits", "write the logits of every prompt position");
    opts->model.add_to(*cmd);
    auto* tokens = cmd->add_option("--tokens", opts->tokens, "comma-separated token ids");
    auto* prompt =
        cmd->add_option("-p,--prompt", opts->prompt, "prompt text (special tokens parsed)");
    tokens->excludes(prompt);
    cmd->add_option("-o,--out", opts->out, "output file (float32, num_tokens x vocab)")->required();
    cmd->callback([opts] { run_logits(*opts); });
}

}  // namespace servelab::cli
