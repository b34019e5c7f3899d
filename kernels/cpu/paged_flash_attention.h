// paged_flash_attention.h — causal attention over a paged cache, split over key ranges, with an
// online softmax (FlashAttention's and FlashDecoding's ideas, on the CPU).
//
// Part of the kernels (Lab 4's cache, chapter 11.4; the stack's
// FlashAttention, chapter 11.7). The engine's paged attention, for prefill
// chunks and decode steps alike; paged_attention.h is the plain kernel it is
// tested against. A decode step has one query token (a speculative
// verification K + 1) and a GQA model few KV heads: SmolLM2 has 3, so
// paged_attention's work items (query token × KV head) would keep one of 2
// threads idle a third of the time, and its loops hold every score of the
// context. Here each query's keys are cut into ranges of kKeysPerSplit, one
// work item per (query token, KV head, range). An item walks its keys 16 at
// a time with an online softmax — a running max m, a running sum l of
// exp(s − m) and an unnormalized output o = Σ exp(s − m)·v, rescaled by
// exp(m_old − m_new) whenever the max grows — so it never stores more than
// one tile of scores. The ranges' (m, l, o) are then merged exactly:
//   M = max m_r,   L = Σ l_r·exp(m_r − M),   out = Σ o_r·exp(m_r − M) / L
// (Dao et al., FlashAttention, 2022; the key split is FlashDecoding's, 2023).
//
// The ranges start at fixed positions (multiples of kKeysPerSplit), so a
// query's arithmetic depends only on its own position and keys — never on
// how many queries share the step or how many threads run it. That keeps
// greedy speculative decoding token-for-token equal to plain decoding: a
// verification pass computes each drafted position exactly as a decode step
// would. The result equals paged_attention's to float rounding (the sums
// are taken in another order).
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace servelab {

// Keys per range: a multiple of the 16-key tile. 8 ranges at a 1k context.
inline constexpr int64_t kKeysPerSplit = 128;

// paged_attention's arguments and result (paged_attention.h):
// q, out:               (num_queries, num_heads, head_dim)
// key_pool, value_pool: (num_blocks · block_size, num_kv_heads, head_dim)
// block_table:          ceil(num_keys / block_size) physical block ids
// Query t sees keys 0 .. num_keys − num_queries + t (the causal mask).
// Throws servelab::Error for a malformed shape.
void paged_flash_attention(const float* q, const float* key_pool, const float* value_pool,
                           const int32_t* block_table, int64_t block_size, float* out,
                           const AttentionShape& shape);

}  // namespace servelab
