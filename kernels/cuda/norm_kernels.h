// norm_kernels.h — RMSNorm, SiLU-and-multiply, residual add and the embedding gather on the GPU.
//
// Part of the CUDA backend (issue 7; chapter 11.2's layer, on a GPU). The
// activations are bf16 in memory; every kernel computes in fp32 (the
// RMSNorm statistics, the SiLU) and rounds once when it stores. Each is the
// plain version kept for teaching: one thread block per row (RMSNorm), one
// thread per element (the rest). Pointers are device pointers; `stream` may
// be 0. Launch errors throw servelab::Error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::cuda {

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, for r < rows.
void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* weight, __nv_bfloat16* out,
                  int64_t rows, int64_t dim, float eps, cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void silu_mul_bf16(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out,
                   int64_t n, cudaStream_t stream);

// x[i] += delta[i].
void add_inplace_bf16(__nv_bfloat16* x, const __nv_bfloat16* delta, int64_t n, cudaStream_t stream);

// out[t, :] = table[token_ids[t], :]; ids outside [0, vocab_size) write zeros
// (the host validates ids first; the check keeps a bad id from reading
// outside the table).
void embedding_gather_bf16(const __nv_bfloat16* table, const int32_t* token_ids, __nv_bfloat16* out,
                           int64_t num_tokens, int64_t dim, int64_t vocab_size,
                           cudaStream_t stream);

}  // namespace servelab::cuda
