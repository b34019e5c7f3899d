// tiny_model.h — a deterministic generator of small random llama GGUF files.
//
// Part of the test tooling (all labs). Most tests run on a model generated
// here (milliseconds) instead of the real one (seconds): the same loader,
// tokenizer and forward pass run, only the sizes are small. The vocabulary is
// byte-level (256 byte tokens, a few merges, ChatML control tokens) so any
// text can be tokenized.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/ggml_types.h"

namespace servelab {

struct TinyModelOptions {
    uint64_t seed = 1;
    int64_t num_layers = 2;
    int64_t dim = 64;
    int64_t num_heads = 4;
    int64_t num_kv_heads = 2;
    int64_t ffn_dim = 128;
    int64_t context_length = 256;
    float rope_freq_base = 10000.0f;
    GgmlType weight_type = GgmlType::kF32;  // for the 2-D matrices; norms stay F32
    bool tied_embeddings = true;            // false writes a separate output.weight

    // Multi-head latent attention (Lab 3): writes a "deepseek2" model (dense
    // MLP in every layer) with DeepSeek-V2's metadata keys and tensor names.
    // num_kv_heads is then ignored; head_dim is qk_nope_dim + qk_rope_dim.
    bool mla = false;
    int64_t kv_lora_rank = 32;  // d_c, the cached latent width
    int64_t q_lora_rank = 0;    // 0: attn_q; > 0: attn_q_a → norm → attn_q_b
    int64_t qk_nope_dim = 16;
    int64_t qk_rope_dim = 8;
    int64_t v_head_dim = 16;

    // 0: the byte-level vocabulary alone; more pads it with unused tokens (benchmarks).
    int64_t vocab_size = 0;
    // 0: every value from one sequential stream of normal draws (what the
    // tests' goldens were made with). More: a real model's size (a
    // benchmark's 1B or 8B shapes, reference/model/model_shapes.h), so the
    // values come from independently seeded chunks that this many threads
    // draw, quantize and write at once (tiny_model_streaming.cpp); the bytes
    // are the same for any thread count, but not those of the sequential
    // stream.
    int64_t write_threads = 0;
    // tokenizer.chat_template; empty writes none (chat then uses ChatML).
    std::string chat_template;
    // More tokens, user-defined (they decode to their own text), after the
    // byte-level ones: a test can force a whole text in one token with
    // logit_bias (a tool call, tests/e2e/test_tool_calling.py).
    std::vector<std::string> user_tokens;
};

// The GGUF image, ready for GgufFile::parse or to be written to disk.
std::vector<uint8_t> make_tiny_model(const TinyModelOptions& options);
void write_tiny_model(const TinyModelOptions& options, const std::string& path);

// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"; throws servelab::Error otherwise.
GgmlType parse_weight_type(const std::string& name);

}  // namespace servelab
