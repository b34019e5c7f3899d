// model_weights.h — the tensors of a llama-family model, as fp32 matrices.
//
// Part of the model loader (all labs). Weights are dequantized once at load
// ("exact mode": the numbers the numpy oracle computes with). Every matrix
// is stored row-major with one output feature per row, as ggml stores it, so
// a projection is y = x · Wᵀ (kernels/cpu/matmul.h). Shapes are checked
// against the config before anything is read.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/model/model_config.h"

namespace servelab {

class GgufFile;

struct LayerWeights {
    std::vector<float> attn_norm;  // (dim)
    std::vector<float> wq;         // (num_heads * head_dim, dim); MLA: empty when q_lora_rank > 0
    std::vector<float> wk;         // (num_kv_heads * head_dim, dim); empty for MLA
    std::vector<float> wv;         // (num_kv_heads * head_dim, dim); empty for MLA
    std::vector<float> wo;         // (dim, num_heads * v_head_dim)

    // MLA only (deepseek2 tensor names in brackets). Per head, queries and
    // keys are [nope | rope]: qk_nope_dim dims without position, then rope_dim.
    std::vector<float> wq_a;       // [attn_q_a]  (q_lora_rank, dim), when q_lora_rank > 0
    std::vector<float> q_a_norm;   // [attn_q_a_norm]  (q_lora_rank)
    std::vector<float> wq_b;       // [attn_q_b]  (num_heads * head_dim, q_lora_rank)
    std::vector<float> wkv_a;      // [attn_kv_a_mqa]  (kv_lora_rank + rope_dim, dim): c_kv | k_pe
    std::vector<float> kv_a_norm;  // [attn_kv_a_norm]  (kv_lora_rank)
    // [attn_kv_b] (num_heads * (qk_nope_dim + v_head_dim), kv_lora_rank): per head,
    // qk_nope_dim rows of W_UK (latent → key) then v_head_dim rows of W_UV (latent → value).
    std::vector<float> wkv_b;
    std::vector<float> ffn_norm;  // (dim)
    std::vector<float> w_gate;    // (ffn_dim, dim)
    std::vector<float> w_up;      // (ffn_dim, dim)
    std::vector<float> w_down;    // (dim, ffn_dim)
};

struct ModelWeights {
    std::vector<float> token_embedding;  // (vocab_size, dim)
    std::vector<LayerWeights> layers;    // (num_layers)
    std::vector<float> output_norm;      // (dim)
    std::vector<float> output;           // (vocab_size, dim); empty when tied

    // The output head: `output`, or the embedding table when they are tied.
    const float* output_matrix() const {
        return output.empty() ? token_embedding.data() : output.data();
    }

    // Throws servelab::Error for a missing tensor, a shape mismatch or an
    // unsupported tensor type.
    static ModelWeights load(const GgufFile& file, const ModelConfig& config);
};

// Parameters counted from the config (embedding and head counted once when tied).
int64_t count_parameters(const ModelConfig& config);

// Bytes of weights one decode step reads for one token, as they are held in
// memory: every layer's matrices and norms, the final norm, the output head
// and one embedding row. Batch-1 decode's memory traffic, for the roofline
// (issue 11, `servelab bench --json`).
int64_t decode_weight_bytes(const ModelWeights& weights, const ModelConfig& config);

}  // namespace servelab
