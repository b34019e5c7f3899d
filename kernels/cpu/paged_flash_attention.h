// paged_flash_attention.h — the engine's attention over a paged cache: FlashAttention's tiles for
// prefill, flash-decoding's key split for decode steps.
//
// Part of the kernels (Lab 4's cache, chapter 11.4; Lab 9, FlashAttention,
// chapter 11.7). The entry point the model runner calls for every chunk;
// paged_attention.h is the plain kernel it is tested against. It gathers
// the block table once (map_pool_rows, Lab 4), cuts the step's queries
// into tiles of kQueriesPerTile query tokens, and lays each tile out as
// query rows per KV head: the tile's tokens × the heads of that head's GQA
// group, scaled by 1/sqrt(head_dim). Then:
//   one tile (a decode step, a verification, a short chunk): flash_decoding,
//     every (KV head, key range) a work item, so both threads work on one
//     query's long context;
//   more (prefill): flash_attention_prefill, a work item per (query tile,
//     KV head), its key ranges walked in order.
// Both walk the same fixed key ranges (multiples of kKeysPerRange) and merge
// them in the same order, and a row's arithmetic never depends on the
// other rows of its tile, so a query's output depends only on its own
// position and keys — never on how many queries share the step, which path
// ran, or how many threads. That keeps greedy speculative decoding
// token-for-token equal to plain decoding (a verification pass computes each
// drafted position as a decode step would), and a preempted request's
// recomputed prompt equal to its first prefill. The result equals
// paged_attention's to float rounding (the sums are taken in another order).
#pragma once

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/flash_attention.h"

namespace servelab {

// Query tokens per tile: 8 tokens × SmolLM2's 3 heads per group is 24 rows,
// whose queries, softmax states and key and value tile (about 30 KB) stay in
// a core's L1 data cache.
inline constexpr int64_t kQueriesPerTile = 8;

// paged_attention's arguments and result (paged_attention.h):
// q, out:               (num_queries, num_heads, head_dim)
// key_pool, value_pool: (num_blocks · block_size, num_kv_heads, head_dim)
// block_table:          ceil(num_keys / block_size) physical block ids
// Query t sees keys 0 .. num_keys − num_queries + t (the causal mask).
// Throws servelab::Error for a malformed shape.
// decode_keys_per_range: the decode schedule's key split. The engine keeps
// the default, which is what makes decode and prefill agree bit for bit;
// benchmarks pass a context-sized one to time decode unsplit.
void paged_flash_attention(const float* q, const float* key_pool, const float* value_pool,
                           const int32_t* block_table, int64_t block_size, float* out,
                           const AttentionShape& shape,
                           int64_t decode_keys_per_range = kKeysPerRange);

}  // namespace servelab
