// mla_block.h — a DeepSeek-V2 layer's attention block: from the normed rows to the heads' outputs.
//
// Lab 3 (chapter 11.3, MLA). In an MLA model (deepseek2) this block takes
// the place of a llama layer's q/k/v projections, RoPE, cache append and
// attention (reference/engine/llama_forward.h calls it; the output
// projection and the residual stay the layer walk's). Per head, queries are
// [q_nope | q_pe]; the layer caches only
//   c_kv = RMSNorm(the first kv_lora_rank numbers of h·W_kv_aᵀ)   the latent
//   k_pe = RoPE(the last rope_dim numbers)                        one shared key
// and attends over them in the form MlaMode names (mla_attention.h: naive
// or absorbed; the same logits).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/attention/mla_attention.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"

namespace servelab {

// One thread at a time: a call writes the block's scratch rows. The config
// must outlive the block.
class MlaBlock {
  public:
    MlaBlock(const ModelConfig& config, MlaMode mode);

    // out (T, num_heads, v_head_dim) = MLA attention of the T rows `normed`
    // (T, dim), the step's tokens at `positions` (T, consecutive from
    // start_position), over layer `layer_index` of `cache`: their latents
    // and RoPE keys are written to it first, at [start_position,
    // start_position + T), and every query attends over all cached tokens
    // up to its own.
    void attend(int64_t layer_index, const LayerWeights& layer, const float* normed,
                std::span<const int64_t> positions, int64_t start_position, KvCache& cache,
                float* out);

  private:
    void resize(int64_t num_tokens);
    // q (through the low-rank bottleneck when q_lora_rank > 0), split per
    // head into q_nope_ and q_pe_ (RoPE not yet applied).
    void project_queries(const LayerWeights& layer, const float* normed, int64_t num_tokens);
    // c_kv_ = RMSNorm(latent part), k_pe_ = the RoPE part (not yet rotated).
    void project_latents(const LayerWeights& layer, const float* normed, int64_t num_tokens);

    const ModelConfig& config_;
    // The form MlaMode names, picked once when the block is built.
    decltype(&mla_attention_absorbed) attention_;
    // Sized for the step's T tokens on demand; they only grow.
    std::vector<float> q_;       // (T, num_heads, head_dim): head_dim = qk_nope_dim + rope_dim
    std::vector<float> q_a_;     // (T, q_lora_rank) the query bottleneck
    std::vector<float> q_nope_;  // (T, num_heads, qk_nope_dim)
    std::vector<float> q_pe_;    // (T, num_heads, rope_dim)
    std::vector<float> kv_a_;    // (T, kv_lora_rank + rope_dim): c_kv | k_pe before norm / RoPE
    std::vector<float> c_kv_;    // (T, kv_lora_rank)
    std::vector<float> k_pe_;    // (T, rope_dim)
};

}  // namespace servelab
