// paged_prefill_attention_mma.h — causal prefill attention over the paged cache on tensor
// cores (FlashAttention-2 on mma.sync).
//
// Part of the CUDA backend (issue 48; chapter 11.5; Lab 9's GPU track). The
// same contract as paged_prefill_attention.h — the same packed chunks, pools,
// block tables, query_start and context_lens, the same PagedPrefillShape —
// computed with bf16 tensor-core products and fp32 accumulation: q·kᵀ and
// p·v run as mma.sync m16n8k16, the online softmax stays in registers, and
// key tiles wholly above the causal diagonal are never loaded.
// paged_prefill_attention.h keeps the plain, scalar version of the same
// computation; this one differs from it by rounding only: the probabilities
// p are rounded to bf16 before p·v (the tensor cores take bf16), where the
// scalar kernel multiplies them in fp32.
//
// Head widths 64 and 128 only (the widths of the models served; each is a
// template instance with its own register tiles). Others throw; the runner
// sends them to the scalar kernel (paged_prefill_mma_supports_head_dim).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/paged_prefill_attention.h"

namespace servelab::cuda {

// Whether paged_prefill_attention_mma_bf16 takes heads `head_dim` wide.
bool paged_prefill_mma_supports_head_dim(int64_t head_dim);

// The tile sizes, for tests that place sequence lengths around the tile edges.
inline constexpr int64_t kMmaPrefillQueryTile = 64;  // query rows per thread block
inline constexpr int64_t kMmaPrefillKeyTile = 64;    // keys per shared-memory tile

// Arguments as paged_prefill_attention_bf16's; the pools hold fewer than
// 2^31 rows (num_blocks · block_size: the index arithmetic is 32-bit, as the
// runner's pools are). Throws servelab::Error for a head_dim other than 64
// or 128 and for the shapes the scalar kernel refuses.
void paged_prefill_attention_mma_bf16(const __nv_bfloat16* q, const __nv_bfloat16* key_pool,
                                      const __nv_bfloat16* value_pool, const int32_t* block_tables,
                                      const int32_t* query_start, const int32_t* context_lens,
                                      __nv_bfloat16* out, const PagedPrefillShape& shape,
                                      cudaStream_t stream);

}  // namespace servelab::cuda
