// mla_attention.h — multi-head latent attention (MLA, DeepSeek-V2), two ways.
//
// Lab 3 (chapter 11.3, MLA). MLA caches, per token and layer, only
//   c_kv  = RMSNorm(x · W_DKVᵀ)   the latent, kv_lora_rank (d_c) numbers, and
//   k_pe  = RoPE(x · W_KRᵀ)       one rope_dim key shared by all heads,
// instead of num_kv_heads × head_dim keys and values. Every head's keys and
// values are linear in the latent: k_nope_h = W_UK_h · c_kv, v_h = W_UV_h · c_kv
// (W_UK_h, W_UV_h are head h's rows of attn_kv_b). A head's score and output are
//   score_j = (q_nope_h · k_nope_h,j + q_pe_h · k_pe_j) / sqrt(qk_nope_dim + rope_dim)
//   out_h   = Σ_j softmax(score)_j · v_h,j
//
// naive:    rebuild k_nope and v of every cached token and head from the
//           latents, then ordinary attention. Per step that is
//           num_keys × num_heads × (qk_nope_dim + v_head_dim) × d_c work —
//           the whole cache is up-projected again at every decode step.
// absorbed: use associativity instead. q_nope_h · (W_UK_h c_j) = (W_UK_hᵀ q_nope_h) · c_j,
//           so W_UK is folded into the query (one d_c-wide "latent query" per
//           head), and Σ_j p_j (W_UV_h c_j) = W_UV_h (Σ_j p_j c_j), so W_UV is
//           folded into the output side. Attention then runs directly over the
//           cached latents, like MQA with a key of width d_c + rope_dim whose
//           first d_c numbers double as the value, and the up-projections cost
//           is per query, independent of the context length.
// Both compute the same numbers (up to fp32 rounding); tests hold them to it.
#pragma once

#include <cstdint>

#include "kernels/cpu/kv_view.h"

namespace servelab {

// Which of the two forms a model's MLA layers use (both give the same
// logits up to fp32 rounding): --mla-attention absorbed (the default) or naive.
enum class MlaMode { kAbsorbed, kNaive };

struct MlaShape {
    int64_t num_queries = 0;  // tokens computed this step: the last num_queries of num_keys
    int64_t num_keys = 0;     // tokens in the cache, this step's included
    int64_t num_heads = 0;
    int64_t qk_nope_dim = 0;
    int64_t rope_dim = 0;
    int64_t v_head_dim = 0;
    int64_t kv_lora_rank = 0;  // d_c
};

// q_nope:    (num_queries, num_heads, qk_nope_dim)
// q_pe:      (num_queries, num_heads, rope_dim), RoPE already applied
// rope_keys: the cached k_pe, (num_keys, 1, rope_dim), RoPE already applied
// latents:   the cached c_kv, (num_keys, 1, kv_lora_rank)
// wkv_b:     (num_heads * (qk_nope_dim + v_head_dim), kv_lora_rank), see model_weights.h
// out:       (num_queries, num_heads, v_head_dim), before the output projection
void mla_attention_naive(const float* q_nope, const float* q_pe, const KvView& rope_keys,
                         const KvView& latents, const float* wkv_b, float* out,
                         const MlaShape& shape);
void mla_attention_absorbed(const float* q_nope, const float* q_pe, const KvView& rope_keys,
                            const KvView& latents, const float* wkv_b, float* out,
                            const MlaShape& shape);

}  // namespace servelab
