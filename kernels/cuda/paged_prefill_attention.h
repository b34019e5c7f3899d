// paged_prefill_attention.h — causal attention of prompt chunks over the paged cache,
// FlashAttention style.
//
// Part of the CUDA backend (issue 7; chapters 11.4 and 11.5: chunked prefill
// over PagedAttention). A step's prefill chunks are packed one after another
// (a "varlen" batch): sequence s owns query rows [query_start[s],
// query_start[s+1]) and, after this step's keys were appended
// (kv_append.h), context_lens[s] tokens in the pool. Its chunk is the LAST
// q_len = query_start[s+1] - query_start[s] of those tokens, so query row i
// of the chunk sits at position context_lens[s] - q_len + i and attends to
// keys 0..that position (causal; earlier chunks and prefix-cache hits are
// simply keys already in the pool). A decode token is the case q_len = 1.
//
// The kernel tiles queries and keys and keeps a running max and sum per
// query row (the online softmax of FlashAttention, Dao et al. 2022), so no
// (q_len × context) score matrix is ever stored and any length works. Scores
// and statistics are fp32; q·kᵀ is scaled by 1/sqrt(head_dim).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace servelab::cuda {

struct PagedPrefillShape {
    int64_t num_seqs = 0;
    int64_t num_query_tokens = 0;  // query_start[num_seqs]: rows of q and out
    int64_t max_query_len = 0;     // >= every chunk's q_len; sizes the grid
    int64_t num_heads = 0;         // query heads
    int64_t num_kv_heads = 0;      // divides num_heads
    int64_t head_dim = 0;          // at most 256
    int64_t block_size = 0;
    int64_t max_blocks_per_seq = 0;  // the row stride of block_tables
};

// Throws servelab::Error, naming `kernel`, for a shape no prefill kernel
// takes: KV heads that do not divide the query heads, a block size under
// 1, more heads or sequences than a grid dimension holds (65535). Each
// kernel checks its own head widths first.
void check_prefill_shape(const PagedPrefillShape& shape, const std::string& kernel);

// q, out:       (num_query_tokens, num_heads, head_dim) bf16
// key_pool, value_pool: (num_blocks · block_size, num_kv_heads, head_dim) bf16
// block_tables: (num_seqs, max_blocks_per_seq)
// query_start:  (num_seqs + 1) prefix sums of the chunks' lengths, query_start[0] = 0
// context_lens: (num_seqs) tokens in the pool for each sequence, >= its q_len
// Throws servelab::Error for a head_dim the kernel does not take.
void paged_prefill_attention_bf16(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                  const __nv_bfloat16* value_pool, const int32_t* block_tables,
                                  const int32_t* query_start, const int32_t* context_lens,
                                  __nv_bfloat16* out, const PagedPrefillShape& shape,
                                  cudaStream_t stream);

}  // namespace servelab::cuda
