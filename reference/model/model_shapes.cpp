// model_shapes.cpp — see model_shapes.h.
#include "reference/model/model_shapes.h"

#include <fmt/format.h>

#include <array>

#include "kernels/common/error.h"

namespace servelab {
namespace {

// From each model's config.json on the Hugging Face hub. RoPE scaling
// ("rope_type": "llama3", factor 32 / 8) is left out: servelab does not
// read it, and it changes the frequencies, not what a step costs.
constexpr std::array kShapes = {
    ModelShape{.name = "smollm2-135m",
               .source = "HuggingFaceTB/SmolLM2-135M-Instruct",
               .num_layers = 30,
               .dim = 576,
               .num_heads = 9,
               .num_kv_heads = 3,
               .ffn_dim = 1536,
               .vocab_size = 49152,
               .context_length = 8192,
               .rope_freq_base = 100000.0f,
               .tied_embeddings = true},
    ModelShape{.name = "llama-3.2-1b",
               .source = "meta-llama/Llama-3.2-1B-Instruct",
               .num_layers = 16,
               .dim = 2048,
               .num_heads = 32,
               .num_kv_heads = 8,
               .ffn_dim = 8192,
               .vocab_size = 128256,
               .context_length = 131072,
               .rope_freq_base = 500000.0f,
               .tied_embeddings = true},
    ModelShape{.name = "llama-3.1-8b",
               .source = "meta-llama/Llama-3.1-8B-Instruct",
               .num_layers = 32,
               .dim = 4096,
               .num_heads = 32,
               .num_kv_heads = 8,
               .ffn_dim = 14336,
               .vocab_size = 128256,
               .context_length = 131072,
               .rope_freq_base = 500000.0f,
               .tied_embeddings = false},
};

}  // namespace

std::span<const ModelShape> model_shapes() {
    return kShapes;
}

const ModelShape& find_model_shape(const std::string& name) {
    std::string known;
    for (const ModelShape& shape : kShapes) {
        if (name == shape.name) return shape;
        known += known.empty() ? shape.name : fmt::format(", {}", shape.name);
    }
    throw Error(fmt::format("unknown model shape '{}' (known: {})", name, known));
}

void apply_model_shape(const ModelShape& shape, TinyModelOptions& options) {
    options.num_layers = shape.num_layers;
    options.dim = shape.dim;
    options.num_heads = shape.num_heads;
    options.num_kv_heads = shape.num_kv_heads;
    options.ffn_dim = shape.ffn_dim;
    options.vocab_size = shape.vocab_size;
    options.context_length = shape.context_length;
    options.rope_freq_base = shape.rope_freq_base;
    options.tied_embeddings = shape.tied_embeddings;
    options.mla = false;
}

int64_t model_shape_parameters(const ModelShape& shape) {
    const int64_t head_dim = shape.dim / shape.num_heads;
    const int64_t attention = shape.dim * shape.num_heads * head_dim           // q
                              + 2 * shape.dim * shape.num_kv_heads * head_dim  // k, v
                              + shape.num_heads * head_dim * shape.dim;        // output
    const int64_t mlp = 3 * shape.dim * shape.ffn_dim;                         // gate, up, down
    const int64_t norms = 2 * shape.dim;
    const int64_t embedding = shape.vocab_size * shape.dim;
    return shape.num_layers * (attention + mlp + norms) + embedding + shape.dim +
           (shape.tied_embeddings ? 0 : embedding);
}

}  // namespace servelab
