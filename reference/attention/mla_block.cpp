// mla_block.cpp — see mla_block.h.
#include "reference/attention/mla_block.h"

#include <algorithm>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"

namespace servelab {

MlaBlock::MlaBlock(const ModelConfig& config, MlaMode mode)
    : config_(config),
      attention_(mode == MlaMode::kNaive ? mla_attention_naive : mla_attention_absorbed) {}

void MlaBlock::resize(int64_t num_tokens) {
    const ModelConfig& c = config_;
    const auto n = [num_tokens](int64_t width) { return size_t(num_tokens * width); };
    q_.resize(n(c.q_dim()));
    q_a_.resize(n(c.q_lora_rank));
    q_nope_.resize(n(c.num_heads * c.qk_nope_dim));
    q_pe_.resize(n(c.num_heads * c.rope_dim));
    kv_a_.resize(n(c.kv_lora_rank + c.rope_dim));
    c_kv_.resize(n(c.kv_lora_rank));
    k_pe_.resize(n(c.rope_dim));
}

void MlaBlock::attend(int64_t layer_index, const LayerWeights& layer, const float* normed,
                      std::span<const int64_t> positions, int64_t start_position, KvCache& cache,
                      float* out) {
    const ModelConfig& c = config_;
    const int64_t num_tokens = int64_t(positions.size());
    resize(num_tokens);
    project_queries(layer, normed, num_tokens);
    project_latents(layer, normed, num_tokens);
    const RopeParams rope{c.rope_dim, c.rope_dim, c.rope_freq_base};
    rope_apply_rows(q_pe_.data(), positions.data(), num_tokens, c.num_heads, rope);
    rope_apply_rows(k_pe_.data(), positions.data(), num_tokens, 1, rope);
    // The latent and the shared RoPE key: all this layer caches.
    cache.write(layer_index, start_position, k_pe_.data(), c_kv_.data(), num_tokens);

    const MlaShape shape{.num_queries = num_tokens,
                         .num_keys = start_position + num_tokens,
                         .num_heads = c.num_heads,
                         .qk_nope_dim = c.qk_nope_dim,
                         .rope_dim = c.rope_dim,
                         .v_head_dim = c.v_head_dim,
                         .kv_lora_rank = c.kv_lora_rank};
    attention_(q_nope_.data(), q_pe_.data(), cache.keys(layer_index), cache.values(layer_index),
               layer.wkv_b.data(), out, shape);
}

void MlaBlock::project_queries(const LayerWeights& layer, const float* normed, int64_t num_tokens) {
    const ModelConfig& c = config_;
    if (c.q_lora_rank > 0) {
        matmul(normed, layer.wq_a.data(), q_a_.data(), num_tokens, c.dim, c.q_lora_rank);
        rmsnorm_rows(q_a_.data(), layer.q_a_norm.data(), q_a_.data(), num_tokens, c.q_lora_rank,
                     c.rms_norm_eps);
        matmul(q_a_.data(), layer.wq_b.data(), q_.data(), num_tokens, c.q_lora_rank, c.q_dim());
    } else {
        layer.wq.multiply(normed, q_.data(), num_tokens);
    }
    for (int64_t row = 0; row < num_tokens * c.num_heads; ++row) {  // split [nope | pe]
        const float* q_head = q_.data() + row * c.head_dim;
        std::copy(q_head, q_head + c.qk_nope_dim, q_nope_.data() + row * c.qk_nope_dim);
        std::copy(q_head + c.qk_nope_dim, q_head + c.head_dim, q_pe_.data() + row * c.rope_dim);
    }
}

void MlaBlock::project_latents(const LayerWeights& layer, const float* normed, int64_t num_tokens) {
    const ModelConfig& c = config_;
    const int64_t kv_a_width = c.kv_lora_rank + c.rope_dim;
    matmul(normed, layer.wkv_a.data(), kv_a_.data(), num_tokens, c.dim, kv_a_width);
    for (int64_t t = 0; t < num_tokens; ++t) {
        const float* row = kv_a_.data() + t * kv_a_width;
        rmsnorm(row, layer.kv_a_norm.data(), c_kv_.data() + t * c.kv_lora_rank, c.kv_lora_rank,
                c.rms_norm_eps);
        std::copy(row + c.kv_lora_rank, row + kv_a_width, k_pe_.data() + t * c.rope_dim);
    }
}

}  // namespace servelab
