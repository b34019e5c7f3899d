// paged_decode_attention.h — attention for a few query tokens over a long paged context,
// split over key ranges (flash-decoding on the CPU).
//
// Part of the kernels (Lab 4's cache, chapter 11.4; FlashAttention's online
// softmax, chapter 11.7). A decode step has one query token (a speculative
// verification K + 1), and a GQA model few KV heads: SmolLM2 has 3, so
// paged_attention's work items (query token × KV head) would keep one of 2
// threads idle a third of the time, and its loops hold every score of the
// context. Here each (query token, KV head) is split further into ranges of
// keys, one work item each. An item walks its keys 16 at a time with an
// online softmax — a running max m, a running sum l of exp(s − m) and an
// unnormalized output o = Σ exp(s − m)·v, rescaled by exp(m_old − m_new)
// whenever the max grows — so it never stores more than one tile of scores.
// The ranges' (m, l, o) triples are then merged exactly:
//   M = max m_r,   L = Σ l_r·exp(m_r − M),   out = Σ o_r·exp(m_r − M) / L
// (Dao et al., FlashAttention, 2022; the split is FlashDecoding's, 2023).
// The result equals paged_attention's to float rounding (the sums are taken
// in another order).
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace servelab {

// paged_attention's arguments and result (paged_attention.h):
// q, out:               (num_queries, num_heads, head_dim)
// key_pool, value_pool: (num_blocks · block_size, num_kv_heads, head_dim)
// block_table:          ceil(num_keys / block_size) physical block ids
// Query t sees keys 0 .. num_keys − num_queries + t (the causal mask).
void paged_decode_attention(const float* q, const float* key_pool, const float* value_pool,
                            const int32_t* block_table, int64_t block_size, float* out,
                            const AttentionShape& shape);

// The steps the engine sends here rather than to paged_attention: few
// queries, where splitting the keys is what keeps every thread busy.
inline constexpr int64_t kMaxDecodeAttentionQueries = 16;

}  // namespace servelab
