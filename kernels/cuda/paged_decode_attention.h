// paged_decode_attention.h — decode attention over the paged KV cache on the GPU (plain version).
//
// Part of the CUDA backend (issue 7; chapter 11.4, PagedAttention, on a
// GPU). Each sequence of a decode step has one query token; its keys and
// values are read through its block table from the pools, exactly as
// kernels/cpu/paged_attention.h does on the CPU: token j of a sequence is
// pool row block_table[j / block_size] · block_size + j % block_size.
//
// This is the version kept for teaching: one thread block per (sequence,
// query head), the scores of the whole context in shared memory, then an
// exact softmax and the weighted sum of values. Its limits, which the fast
// (split-K, GQA-aware) version will lift: the context must fit shared memory
// (the host checks it), and each query head of a GQA group reads its KV
// head's rows again.
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

}  // namespace servelab::cuda
