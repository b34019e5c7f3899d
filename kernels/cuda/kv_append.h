// kv_append.h — write a step's keys and values into the paged KV pool on the GPU.
//
// Part of the CUDA backend (issue 7; chapter 11.4, PagedAttention). The host
// plan step turns each token's position and its sequence's block table into
// one number, the token's pool row ("slot": block · block_size + offset, as
// vLLM's slot_mapping), so the kernel needs no block tables at all: token t's
// (num_kv_heads · head_dim) key and value go to row slot_mapping[t] of each
// pool. A negative slot means "no token here" (the unused rows of a CUDA
// graph's fixed-size batch) and writes nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::cuda {

// k, v:        (num_tokens, kv_dim) bf16, this step's keys (after RoPE) and values
// slot_mapping: (num_tokens) pool rows, or < 0 to skip the token
// key_pool, value_pool: (num_blocks · block_size, kv_dim) bf16, one layer's pools
void kv_append_bf16(const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* slot_mapping,
                    __nv_bfloat16* key_pool, __nv_bfloat16* value_pool, int64_t num_tokens,
                    int64_t kv_dim, cudaStream_t stream);

// Copy-on-write on the device: rows of block `from` to block `to`, for
// `num_copies` (from, to) pairs in `pairs` (2 · num_copies ints), in one pool.
void kv_copy_blocks_bf16(__nv_bfloat16* pool, const int32_t* pairs, int64_t num_copies,
                         int64_t block_size, int64_t kv_dim, cudaStream_t stream);

}  // namespace servelab::cuda
