// model_shapes.h — the shapes of real models, for random-weight files of their size.
//
// Part of the test tooling (benchmarks; issue 48, docs/perf.md). A decode
// step's cost is set by the bytes it reads, and those are set by the shape:
// widths, layers, heads, vocabulary. `servelab make-tiny-model --shape NAME`
// writes random weights of one of these shapes, so both engines can be timed
// on a model the size of a real one without carrying gigabytes to the GPU
// machine. The numbers are the published config.json values; the unit test
// (tests/unit/model_shapes_test.cpp) checks them against the published
// parameter counts.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "reference/model/tiny_model.h"

namespace servelab {

struct ModelShape {
    const char* name;        // what --shape takes: "llama-3.2-1b"
    const char* source;      // the model whose config.json it copies
    int64_t num_layers;      // num_hidden_layers
    int64_t dim;             // hidden_size
    int64_t num_heads;       // num_attention_heads
    int64_t num_kv_heads;    // num_key_value_heads
    int64_t ffn_dim;         // intermediate_size
    int64_t vocab_size;      // vocab_size
    int64_t context_length;  // max_position_embeddings
    float rope_freq_base;    // rope_theta
    bool tied_embeddings;    // tie_word_embeddings
};

// Every named shape, smallest first.
std::span<const ModelShape> model_shapes();

// The shape called `name`; throws servelab::Error naming the known ones otherwise.
const ModelShape& find_model_shape(const std::string& name);

// The generator's options for `shape`: its widths, vocabulary, context, RoPE
// base and head tying. Seed, weight type and threads are left as they were.
void apply_model_shape(const ModelShape& shape, TinyModelOptions& options);

// Parameters the file holds: every matrix, embedding and norm (the head
// counted once when it is tied), as the model cards count them.
int64_t model_shape_parameters(const ModelShape& shape);

}  // namespace servelab
