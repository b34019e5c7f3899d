// cmd_make_tiny_model.cpp — `servelab make-tiny-model`: write a small random llama GGUF.
//
// Part of the CLI (test tooling). The same generator the unit tests use, so
// the Python oracle tests and students can make models of any shape.
#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include "kernels/common/error.h"
#include "reference/cli/commands.h"
#include "reference/model/model_shapes.h"
#include "reference/model/tiny_model.h"

namespace servelab::cli {
namespace {

struct MakeTinyModelOptions {
    std::string out;
    std::string weight_type = "f32";
    bool untied = false;
    std::string chat_template_file;
    std::string shape;         // a named real model's shape (model_shapes.h); empty: the flags'
    int64_t threads = -1;      // -1: all cores with --shape, else the sequential stream
    bool shape_flags = false;  // any of --layers ... --mla given (not allowed with --shape)
    bool context_given = false;
    TinyModelOptions model;
};

// The flags a named shape sets itself.
constexpr const char* kShapeFlags[] = {"--layers",  "--dim",   "--heads",  "--kv-heads",
                                       "--ffn-dim", "--vocab", "--untied", "--mla"};

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
    if (!opts.shape.empty()) {
        if (opts.shape_flags) {
            throw Error(
                "make-tiny-model: --shape sets the widths, layers, vocabulary and head "
                "tying itself; drop the shape flags or --shape");
        }
        apply_model_shape(find_model_shape(opts.shape), model);
        if (opts.context_given) model.context_length = opts.model.context_length;
    }
    // A named shape is a real model's size: many threads, the chunked stream.
    const int64_t all_cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
    model.write_threads = opts.threads >= 0 ? opts.threads : (opts.shape.empty() ? 0 : all_cores);
    const auto start = std::chrono::steady_clock::now();
    write_tiny_model(model, opts.out);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("wrote {} ({}{} weights, {}, {:.1f} s{})", opts.out,
                 opts.shape.empty() ? "" : opts.shape + " shape, ", opts.weight_type,
                 model.tied_embeddings ? "tied head" : "untied head", seconds,
                 model.write_threads > 0 ? fmt::format(", {} threads", model.write_threads) : "");
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
    cmd->add_option("--shape", opts->shape,
                    "a real model's shape with random weights: smollm2-135m, llama-3.2-1b, "
                    "llama-3.1-8b (sets the widths, layers, vocabulary, RoPE base, head tying)");
    cmd->add_option("--threads", opts->threads,
                    "threads drawing the weights; > 0 chooses the chunked stream (other values "
                    "than the default sequential one), default: all cores with --shape, else 0")
        ->check(CLI::Range(int64_t(0), int64_t(1024)));
    cmd->add_option("--chat-template", opts->chat_template_file,
                    "a file whose text becomes tokenizer.chat_template (default: none)")
        ->check(CLI::ExistingFile);
    // One text per flag, taken whole: without allow_extra_args(false), CLI11
    // splits a value like "[a, b]" at its commas.
    cmd->add_option("--add-token", opts->model.user_tokens,
                    "a user-defined token, decoding to its own text (repeatable)")
        ->allow_extra_args(false);
    cmd->callback([opts, cmd] {
        for (const char* flag : kShapeFlags) opts->shape_flags |= cmd->count(flag) > 0;
        opts->context_given = cmd->count("--context") > 0;
        run_make_tiny_model(*opts);
    });
}

}  // namespace servelab::cli
