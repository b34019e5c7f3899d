// fused_norm_kernels.h — the fast residual-add + RMSNorm and SiLU-and-multiply on the GPU.
//
// Part of the CUDA backend (issue 7; chapter 11.2's layer, made fast). The
// plain kernels in norm_kernels.h are the teaching versions: the residual
// add and the RMSNorm are two launches, and the add's result travels to
// memory and back between them. Here they are one kernel that reads the
// residual and the delta once, keeps the row on chip for the statistics
// and writes both the new residual and the normalized row, with 16-byte
// loads (8 bf16) wherever the dimension and the pointers allow. The results
// are the plain pair's: the residual is rounded to bf16 once, and the
// statistics are computed from that rounded residual, as the plain RMSNorm
// would read it from memory. Pointers are device pointers; `stream` may be
// 0. Launch errors throw servelab::Error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::cuda {

// For each of `rows` rows of `dim`: residual += delta (bf16, rounded once),
// then out = residual / sqrt(mean(residual^2) + eps) * weight. delta ==
// nullptr: no add, a plain RMSNorm of residual (left unchanged). out must not
// alias residual or delta. The row is staged in shared memory as bf16
// (2 bytes per value): up to 24576 wide without asking, about 116k on an
// H100/H200 (227 KiB); wider rows fail to launch.
void add_rmsnorm_bf16(__nv_bfloat16* residual, const __nv_bfloat16* delta,
                      const __nv_bfloat16* weight, __nv_bfloat16* out, int64_t rows, int64_t dim,
                      float eps, cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i] for i < n, as silu_mul_bf16, 8 or 2 values
// per load when the pointers are aligned for it; any n.
void silu_mul_fast_bf16(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out,
                        int64_t n, cudaStream_t stream);

}  // namespace servelab::cuda
