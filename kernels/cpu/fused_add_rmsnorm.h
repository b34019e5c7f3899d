// fused_add_rmsnorm.h — the residual add and the next RMSNorm in one pass.
//
// CPU kernel (chapter 11.7, kernel fusion; docs/kernel_fusion.md). Every
// sub-block ends with x += delta and the next one starts with
// h = rmsnorm(x). Unfused that is two passes over the residual stream:
// add_inplace reads x and delta and writes x, then rmsnorm reads x again and
// writes h. Fused, each row of x is read once with its delta, the sum of
// squares is taken as the new x is formed, and h is written from the row
// while it is still in L1. kernels/cuda/fused_norm_kernels.cu does the same
// on the GPU. add_rmsnorm_quantize_rows also quantizes h for fast mode's
// matmuls (with kernels/cpu/fused_rmsnorm_quantize.h): h is never stored as
// fp32 at all.
//
// Bit for bit the numbers of add_inplace, then rmsnorm (then
// quantize_activations). The engine runs them only where
// kernels/cpu/rmsnorm.cpp is the reference version (reference/engine/fusion_plan.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/quant_matmul_fast.h"

namespace servelab {

// x += delta; normed = rmsnorm(x). x, delta, normed: (num_tokens, dim).
void add_rmsnorm_rows(float* x, const float* delta, const float* weight, float* normed,
                      int64_t num_tokens, int64_t dim, float eps);

// x += delta; out = quantize_activations(rmsnorm(x)). dim a multiple of 32.
void add_rmsnorm_quantize_rows(float* x, const float* delta, const float* weight,
                               int64_t num_tokens, int64_t dim, float eps,
                               QuantizedActivations& out);

}  // namespace servelab
