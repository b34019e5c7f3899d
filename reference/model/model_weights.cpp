// model_weights.cpp — see model_weights.h.
#include "reference/model/model_weights.h"

#include <fmt/format.h>

#include <string>

#include "kernels/cpu/dequantize.h"
#include "reference/common/error.h"
#include "reference/model/gguf_reader.h"

namespace servelab {
namespace {

// Dequantize a whole tensor after checking that it has exactly `dims`
// (innermost first, as GGUF lists them).
std::vector<float> load_tensor(const GgufFile& file, const std::string& name,
                               std::vector<int64_t> dims) {
    const GgufTensorInfo& info = file.require_tensor(name, dims);
    const int64_t row_length = info.row_length();
    const int64_t num_rows = info.num_rows();
    const int64_t row_bytes = row_size_bytes(info.type, row_length);
    std::vector<float> values(size_t(num_rows * row_length));
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < num_rows; ++row) {
        dequantize_row(info.type, info.data + row * row_bytes, values.data() + row * row_length,
                       row_length);
    }
    return values;
}

}  // namespace

ModelWeights ModelWeights::load(const GgufFile& file, const ModelConfig& config) {
    const int64_t dim = config.dim;
    ModelWeights weights;
    weights.token_embedding = load_tensor(file, "token_embd.weight", {dim, config.vocab_size});
    weights.layers.resize(size_t(config.num_layers));
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
        const std::string prefix = fmt::format("blk.{}.", layer);
        LayerWeights& w = weights.layers[size_t(layer)];
        w.attn_norm = load_tensor(file, prefix + "attn_norm.weight", {dim});
        w.wq = load_tensor(file, prefix + "attn_q.weight", {dim, config.q_dim()});
        w.wk = load_tensor(file, prefix + "attn_k.weight", {dim, config.kv_dim()});
        w.wv = load_tensor(file, prefix + "attn_v.weight", {dim, config.kv_dim()});
        w.wo = load_tensor(file, prefix + "attn_output.weight", {config.q_dim(), dim});
        w.ffn_norm = load_tensor(file, prefix + "ffn_norm.weight", {dim});
        w.w_gate = load_tensor(file, prefix + "ffn_gate.weight", {dim, config.ffn_dim});
        w.w_up = load_tensor(file, prefix + "ffn_up.weight", {dim, config.ffn_dim});
        w.w_down = load_tensor(file, prefix + "ffn_down.weight", {config.ffn_dim, dim});
    }
    weights.output_norm = load_tensor(file, "output_norm.weight", {dim});
    if (!config.tied_embeddings) {
        weights.output = load_tensor(file, "output.weight", {dim, config.vocab_size});
    }
    return weights;
}

int64_t count_parameters(const ModelConfig& c) {
    const int64_t per_layer = 2 * c.dim                 // the two norms
                              + c.q_dim() * c.dim       // wq
                              + 2 * c.kv_dim() * c.dim  // wk, wv
                              + c.dim * c.q_dim()       // wo
                              + 3 * c.ffn_dim * c.dim;  // gate, up, down
    const int64_t head = c.tied_embeddings ? 0 : c.vocab_size * c.dim;
    return c.vocab_size * c.dim + c.num_layers * per_layer + c.dim + head;
}

}  // namespace servelab
