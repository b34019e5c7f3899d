// model_weights.cpp — see model_weights.h.
#include "reference/model/model_weights.h"

#include <fmt/format.h>

#include <string>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/weight_loading.h"

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

// A whole (num_rows, row_length) projection, kept in the file's format.
WeightMatrix load_matrix(const GgufFile& file, const std::string& name, int64_t row_length,
                         int64_t num_rows) {
    return load_matrix_rows(file, name, row_length, num_rows, 0, num_rows);
}

void load_multi_head_attention(const GgufFile& file, const std::string& prefix,
                               const ModelConfig& config, LayerWeights& w) {
    const int64_t dim = config.dim;
    w.wq = load_matrix(file, prefix + "attn_q.weight", dim, config.q_dim());
    w.wk = load_matrix(file, prefix + "attn_k.weight", dim, config.kv_dim());
    w.wv = load_matrix(file, prefix + "attn_v.weight", dim, config.kv_dim());
}

void load_latent_attention(const GgufFile& file, const std::string& prefix,
                           const ModelConfig& config, LayerWeights& w) {
    const int64_t dim = config.dim;
    if (config.q_lora_rank > 0) {
        w.wq_a = load_tensor(file, prefix + "attn_q_a.weight", {dim, config.q_lora_rank});
        w.q_a_norm = load_tensor(file, prefix + "attn_q_a_norm.weight", {config.q_lora_rank});
        w.wq_b =
            load_tensor(file, prefix + "attn_q_b.weight", {config.q_lora_rank, config.q_dim()});
    } else {
        w.wq = load_matrix(file, prefix + "attn_q.weight", dim, config.q_dim());
    }
    w.wkv_a = load_tensor(file, prefix + "attn_kv_a_mqa.weight",
                          {dim, config.kv_lora_rank + config.rope_dim});
    w.kv_a_norm = load_tensor(file, prefix + "attn_kv_a_norm.weight", {config.kv_lora_rank});
    w.wkv_b = load_tensor(
        file, prefix + "attn_kv_b.weight",
        {config.kv_lora_rank, config.num_heads * (config.qk_nope_dim + config.v_head_dim)});
}

}  // namespace

ModelWeights ModelWeights::load(const GgufFile& file, const ModelConfig& config) {
    const int64_t dim = config.dim;
    ModelWeights weights;
    weights.token_embedding = load_matrix(file, "token_embd.weight", dim, config.vocab_size);
    weights.layers.resize(size_t(config.num_layers));
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
        const std::string prefix = fmt::format("blk.{}.", layer);
        LayerWeights& w = weights.layers[size_t(layer)];
        w.attn_norm = load_tensor(file, prefix + "attn_norm.weight", {dim});
        if (config.is_mla()) {
            load_latent_attention(file, prefix, config, w);
        } else {
            load_multi_head_attention(file, prefix, config, w);
        }
        w.wo = load_matrix(file, prefix + "attn_output.weight", config.attn_out_dim(), dim);
        w.ffn_norm = load_tensor(file, prefix + "ffn_norm.weight", {dim});
        w.w_gate = load_matrix(file, prefix + "ffn_gate.weight", dim, config.ffn_dim);
        w.w_up = load_matrix(file, prefix + "ffn_up.weight", dim, config.ffn_dim);
        w.w_down = load_matrix(file, prefix + "ffn_down.weight", config.ffn_dim, dim);
    }
    weights.output_norm = load_tensor(file, "output_norm.weight", {dim});
    if (!config.tied_embeddings) {
        weights.output = load_matrix(file, "output.weight", dim, config.vocab_size);
    }
    return weights;
}

namespace {

int64_t attention_parameters(const ModelConfig& c) {
    if (!c.is_mla()) return c.q_dim() * c.dim + 2 * c.kv_dim() * c.dim;  // wq, wk, wv
    const int64_t query = c.q_lora_rank > 0
                              ? c.q_lora_rank * (c.dim + 1) + c.q_dim() * c.q_lora_rank
                              : c.q_dim() * c.dim;
    const int64_t latent = (c.kv_lora_rank + c.rope_dim) * c.dim + c.kv_lora_rank +
                           c.num_heads * (c.qk_nope_dim + c.v_head_dim) * c.kv_lora_rank;
    return query + latent;
}

}  // namespace

int64_t count_parameters(const ModelConfig& c) {
    const int64_t per_layer = 2 * c.dim                   // the two norms
                              + attention_parameters(c)   // wq, wk, wv (or MLA's)
                              + c.dim * c.attn_out_dim()  // wo
                              + 3 * c.ffn_dim * c.dim;    // gate, up, down
    const int64_t head = c.tied_embeddings ? 0 : c.vocab_size * c.dim;
    return c.vocab_size * c.dim + c.num_layers * per_layer + c.dim + head;
}

void ModelWeights::set_matmul_mode(MatmulMode mode) {
    token_embedding.set_mode(mode);
    output.set_mode(mode);
    for (LayerWeights& l : layers) {
        for (WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            m->set_mode(mode);
        }
    }
}

namespace {

// Bytes of every layer's matrices, each as `matrix_bytes` counts it, plus
// every fp32 norm of the model (the layers' and the final one).
template <typename MatrixBytes>
int64_t layer_and_norm_bytes(const ModelWeights& w, MatrixBytes matrix_bytes) {
    int64_t bytes = 0;
    int64_t floats = int64_t(w.output_norm.size());
    for (const LayerWeights& l : w.layers) {
        for (const std::vector<float>* tensor : {&l.attn_norm, &l.wq_a, &l.q_a_norm, &l.wq_b,
                                                 &l.wkv_a, &l.kv_a_norm, &l.wkv_b, &l.ffn_norm}) {
            floats += int64_t(tensor->size());
        }
        for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            bytes += matrix_bytes(*m);
        }
    }
    return bytes + floats * int64_t(sizeof(float));
}

}  // namespace

int64_t decode_weight_bytes(const ModelWeights& w) {
    const WeightMatrix& embedding = w.token_embedding;
    const int64_t embedding_row = embedding.rows() > 0 ? embedding.bytes() / embedding.rows() : 0;
    return embedding_row + w.output_head().bytes() +
           layer_and_norm_bytes(w, [](const WeightMatrix& m) { return m.bytes(); });
}

int64_t held_weight_bytes(const ModelWeights& w) {
    // Fast mode's repacked copy (kernels/cpu/quant_matmul_repacked.h) is the
    // same size as the blocks it was made from, and held beside them.
    const auto held = [](const WeightMatrix& m) { return m.bytes() * (m.is_repacked() ? 2 : 1); };
    return held(w.token_embedding) + held(w.output) + layer_and_norm_bytes(w, held);
}

}  // namespace servelab
