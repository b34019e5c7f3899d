// paged_decode_attention.h — decode attention over the paged KV cache on the GPU (plain version).
//
// Part of the CUDA backend (issue 7; chapter 11.4, PagedAttention, on a
// GPU). Each sequence of a decode step has one query token; its keys and
// values are read through its block table from the pools, exactly as
// kernels/cpu/paged_attention.h does on the CPU: token j of a sequence is
// pool row block_table[j / block_size] · block_size + j % block_size.
//
// Two versions:
//   plain (kept for teaching): one thread block per (sequence, query head),
//     the scores of the whole context in shared memory, then an exact
//     softmax and the weighted sum of values. Its limits: the context must
//     fit shared memory (the host checks it), each query head of a GQA
//     group reads its KV head's rows again, and at batch 1 only num_heads
//     blocks run — a few SMs of a hundred.
//   fast (split-K, "flash-decoding", Dao et al. 2023): each sequence's
//     context is cut into num_splits pieces handled by separate blocks, so
//     even one sequence fills the GPU; each block serves a whole GQA group
//     (all query heads of one KV head), so every key and value row is read
//     once per group; each piece keeps a running max and sum (online
//     softmax), and a second kernel merges the pieces' partial results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::cuda {

struct PagedDecodeShape {
    int64_t num_seqs = 0;
    int64_t num_heads = 0;     // query heads
    int64_t num_kv_heads = 0;  // divides num_heads; query head h reads KV head h / (heads / kv)
    int64_t head_dim = 0;
    int64_t block_size = 0;
    int64_t max_blocks_per_seq = 0;  // the row stride of block_tables
    int64_t max_context_len = 0;     // >= every context_lens[s]; sizes shared memory
};

// The longest context the plain kernel takes (its scores fill shared memory).
int64_t paged_decode_max_context(int64_t head_dim);

// q, out:        (num_seqs, num_heads, head_dim), bf16
// key_pool, value_pool: (num_blocks · block_size, num_kv_heads, head_dim), bf16
// block_tables:  (num_seqs, max_blocks_per_seq) physical block ids
// context_lens:  (num_seqs) tokens each sequence attends over, >= 1
// Throws servelab::Error for a max_context_len the kernel cannot hold.
void paged_decode_attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                 const __nv_bfloat16* value_pool, const int32_t* block_tables,
                                 const int32_t* context_lens, __nv_bfloat16* out,
                                 const PagedDecodeShape& shape, cudaStream_t stream);

// ---- fast version: split-K, GQA-aware ----

// No piece is shorter than this many keys (one key tile of the partial
// kernel; only a context's last piece may be): a shorter piece leaves lanes
// of its one tile idle while still paying a block's fixed costs — loading
// the queries, writing the partial result, the merge's extra reads.
inline constexpr int64_t kDecodeMinPieceTokens = 32;
// Never more pieces than this: past it more splits only add merge work and
// workspace, and the pieces grow instead.
inline constexpr int64_t kDecodeMaxSplits = 64;

// Splits for a decode step of shape.num_seqs sequences with contexts up to
// shape.max_context_len, on a GPU of num_sms multiprocessors: enough
// (sequence, KV head, piece) blocks for a few per SM, but never a piece
// under kDecodeMinPieceTokens of the longest context, and 1..kDecodeMaxSplits.
// A large batch already fills the GPU with one block per (sequence, KV
// head) and gets a single piece; batch 1 gets many.
int64_t paged_decode_num_splits(const PagedDecodeShape& shape, int64_t num_sms);
// The most splits paged_decode_num_splits gives for contexts up to
// max_context_len, for any batch and GPU: what a workspace must be sized for.
int64_t paged_decode_max_splits(int64_t max_context_len);
// Floats of scratch the split-K kernel needs: per (sequence, query head,
// split) a partial output (head_dim) plus its running max and sum.
int64_t paged_decode_workspace_floats(const PagedDecodeShape& shape, int64_t num_splits);

// Same contract as paged_decode_attention_bf16, for any context length, plus:
// context_lens[s] may be 0 (an unused row of a CUDA graph's fixed batch),
// which writes zeros. Sequence s's context is cut, at run time, into pieces
// of max(ceil(len / num_splits), min_piece_tokens) keys, so at most
// num_splits of them; the blocks of splits past the last piece return at
// once. Grid and workspace depend only on shape and num_splits, never on the
// lengths, so one launch can be captured in a CUDA graph and replayed as the
// contexts grow: a graph's num_splits is sized for its longest possible
// context, and min_piece_tokens keeps a short one from being cut into
// slivers. Pass kDecodeMinPieceTokens (tests pass 1 to exercise many tiny
// pieces). `workspace` holds paged_decode_workspace_floats(shape, num_splits)
// floats.
void paged_decode_attention_splitk_bf16(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                        const __nv_bfloat16* value_pool,
                                        const int32_t* block_tables, const int32_t* context_lens,
                                        __nv_bfloat16* out, const PagedDecodeShape& shape,
                                        int64_t num_splits, int64_t min_piece_tokens,
                                        float* workspace, cudaStream_t stream);

}  // namespace servelab::cuda
