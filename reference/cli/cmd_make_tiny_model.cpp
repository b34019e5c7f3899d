// cmd_make_tiny_model.cpp — `servelab make-tiny-model`: write a small random llama GGUF.
//
// Part of the CLI (test tooling). The same generator the unit tests use, so
// the Python oracle tests and students can make models of any shape.
#include <spdlog/spdlog.h>

#include <fstream>
#include <iterator>
#include <memory>

#include "reference/cli/commands.h"
#include "reference/model/tiny_model.h"

namespace servelab::cli {
namespace {

struct MakeTinyModelOptions {
    std::string out;
    std::string weight_type = "f32";
    bool untied = false;
    std::string chat_template_file;
    TinyModelOptions model;
};

// The llama shape: layers, widths, heads, vocabulary, context.
void add_tiny_model_shape(CLI::App& cmd, TinyModelOptions& model) {
    cmd.add_option("--layers", model.num_layers)->check(CLI::Range(1, 64))->capture_default_str();
    cmd.add_option("--dim", model.dim)->check(CLI::Range(2, 4096))->capture_default_str();
    cmd.add_option("--heads", model.num_heads)->check(CLI::Range(1, 64))->capture_default_str();
    cmd.add_option("--kv-heads", model.num_kv_heads)
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd.add_option("--ffn-dim", model.ffn_dim)->check(CLI::Range(1, 16384))->capture_default_str();
    // A real model's vocabulary size (Llama 3: 128256) pads the byte-level
    // one with unused tokens, so the embedding and the head cost what they
    // would (a benchmark's model, tools/reports/cpu_peer_report.py's DRAM case).
    cmd.add_option("--vocab", model.vocab_size,
                   "vocabulary size; 0 = the byte-level vocabulary alone (266 tokens)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 18))
        ->capture_default_str();
    cmd.add_option("--context", model.context_length)
        ->check(CLI::Range(2, 1 << 20))
        ->capture_default_str();
}

// Multi-head latent attention's widths (Lab 3): --mla and its ranks.
void add_tiny_model_mla(CLI::App& cmd, TinyModelOptions& model) {
    cmd.add_flag("--mla", model.mla,
                 "multi-head latent attention: a deepseek2 model with a dense MLP (Lab 3)");
    cmd.add_option("--kv-lora-rank", model.kv_lora_rank, "MLA: cached latent width d_c")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    cmd.add_option("--q-lora-rank", model.q_lora_rank, "MLA: query bottleneck (0 = none)")
        ->check(CLI::Range(0, 4096))
        ->capture_default_str();
    cmd.add_option("--qk-nope-dim", model.qk_nope_dim, "MLA: per-head dims without RoPE")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    cmd.add_option("--qk-rope-dim", model.qk_rope_dim, "MLA: shared RoPE key width (even)")
        ->check(CLI::Range(2, 1024))
        ->capture_default_str();
    cmd.add_option("--v-head-dim", model.v_head_dim, "MLA: per-head value width")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
}

void run_make_tiny_model(const MakeTinyModelOptions& opts) {
    TinyModelOptions model = opts.model;
    if (!opts.chat_template_file.empty()) {
        std::ifstream file(opts.chat_template_file, std::ios::binary);
        model.chat_template.assign(std::istreambuf_iterator<char>(file), {});
    }
    model.weight_type = parse_weight_type(opts.weight_type);
    model.tied_embeddings = !opts.untied;
    write_tiny_model(model, opts.out);
    spdlog::info("wrote {} ({} weights, {})", opts.out, opts.weight_type,
                 opts.untied ? "untied head" : "tied head");
}

}  // namespace

void add_make_tiny_model(CLI::App& app) {
    auto opts = std::make_shared<MakeTinyModelOptions>();
    CLI::App* cmd = app.add_subcommand(
        "make-tiny-model", "write a small random llama (or, with --mla, deepseek2) GGUF");
    cmd->add_option("-o,--out", opts->out, "output path")->required();
    cmd->add_option("--seed", opts->model.seed, "random seed")->capture_default_str();
    cmd->add_option("--weight-type", opts->weight_type, "f32, f16, bf16, q8_0, q4_0, q4_1")
        ->capture_default_str();
    cmd->add_flag("--untied", opts->untied, "write a separate output.weight");
    add_tiny_model_shape(*cmd, opts->model);
    add_tiny_model_mla(*cmd, opts->model);
    cmd->add_option("--chat-template", opts->chat_template_file,
                    "a file whose text becomes tokenizer.chat_template (default: none)")
        ->check(CLI::ExistingFile);
    // One text per flag, taken whole: without allow_extra_args(false), CLI11
    // splits a value like "[a, b]" at its commas.
    cmd->add_option("--add-token", opts->model.user_tokens,
                    "a user-defined token, decoding to its own text (repeatable)")
        ->allow_extra_args(false);
    cmd->callback([opts] { run_make_tiny_model(*opts); });
}

}  // namespace servelab::cli
