// model_weights.h — the tensors of a llama-family model.
//
// Part of the model loader (all labs). The projections and the embedding
// table are WeightMatrix: held in the file's block format (Q4_1, Q8_0, …)
// and decoded inside the matmul kernels, so decode reads 0.5–1 byte per
// weight instead of 4 (issue 11). Every matrix has one output feature per
// row, as ggml stores it, so a projection is y = x · Wᵀ. Norms, and the MLA
// projections (a teaching path, not a speed path), are fp32. Shapes are
// checked against the config before anything is read.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/model/model_config.h"
#include "reference/model/weight_matrix.h"

namespace servelab {

class GgufFile;

struct LayerWeights {
    std::vector<float> attn_norm;  // (dim)
    WeightMatrix wq;               // (num_heads * head_dim, dim); MLA: empty when q_lora_rank > 0
    WeightMatrix wk;               // (num_kv_heads * head_dim, dim); empty for MLA
    WeightMatrix wv;               // (num_kv_heads * head_dim, dim); empty for MLA
    WeightMatrix wo;               // (dim, num_heads * v_head_dim)

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
    WeightMatrix w_gate;          // (ffn_dim, dim)
    WeightMatrix w_up;            // (ffn_dim, dim)
    WeightMatrix w_down;          // (dim, ffn_dim)
};

struct ModelWeights {
    WeightMatrix token_embedding;      // (vocab_size, dim)
    std::vector<LayerWeights> layers;  // (num_layers)
    std::vector<float> output_norm;    // (dim)
    WeightMatrix output;               // (vocab_size, dim); empty when tied

    // The output head: `output`, or the embedding table when they are tied.
    const WeightMatrix& output_head() const { return output.empty() ? token_embedding : output; }

    // Every WeightMatrix multiplies in `mode` from now on (--cpu-kernels).
    void set_matmul_mode(MatmulMode mode);

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
int64_t decode_weight_bytes(const ModelWeights& weights);
// Bytes of weights the process holds: every matrix's blocks, the repacked
// copy fast mode keeps beside them where it applies, and the fp32 norms.
// Not what a token reads (decode_weight_bytes: one copy, one embedding row).
int64_t held_weight_bytes(const ModelWeights& weights);

}  // namespace servelab
