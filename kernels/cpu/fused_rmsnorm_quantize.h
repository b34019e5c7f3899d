// fused_rmsnorm_quantize.h — RMSNorm that writes the next matmul's int8 blocks.
//
// CPU kernel (chapter 11.7, kernel fusion: merging operators to cut memory
// traffic; docs/kernel_fusion.md). In fast mode (MatmulMode::kFast) every
// projection quantizes its fp32 input to int8 blocks of 32 first
// (kernels/cpu/quant_matmul_fast.h). Unfused, the input of Q/K/V and of
// gate/up takes two passes: rmsnorm writes the normed rows (4 bytes a
// value), then quantize_activations reads them back and writes codes (1
// byte a value, plus 8 bytes of scale and scaled sum per block). Fused, each
// block of 32 normed values lives in registers only: it is quantized as soon
// as it is computed, and the fp32 normed rows are never written or read.
//
// The numbers are those of rmsnorm followed by quantize_activations, bit for
// bit: the same sum of squares in double, the same x · inv_rms · weight
// products in float, the same block quantizer.
//
// The engine runs it only where kernels/cpu/rmsnorm.cpp is the reference
// version (a lab build keeps the student's rmsnorm: reference/engine/fusion_plan.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/quant_matmul_fast.h"

namespace servelab {

// 1 / sqrt(mean(x²) + eps) over one row of `dim`, as rmsnorm computes it.
float rms_inverse(const float* x, int64_t dim, float eps);

// One row: codes (dim), scales and scaled_sums (dim / 32) of
// quantize(x · inv_rms · weight). dim a multiple of 32.
void rmsnorm_quantize_row(const float* x, const float* weight, int64_t dim, float eps,
                          int8_t* codes, float* scales, float* scaled_sums);

// out = quantize_activations(rmsnorm_rows(x)), x: (num_tokens, dim).
void rmsnorm_quantize_rows(const float* x, const float* weight, int64_t num_tokens, int64_t dim,
                           float eps, QuantizedActivations& out);

}  // namespace servelab
