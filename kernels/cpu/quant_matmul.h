// quant_matmul.h — projections straight from quantized weights: y = x · Wᵀ.
//
// CPU kernel (issue 11; the kernels lab). Decode reads every weight once per
// token, so its speed is bounded by memory bandwidth divided by the bytes of
// the weights. Keeping the weights in their GGUF block format (Q4_1: 20 bytes
// per 32 weights, 0.625 B/weight, against 4 for fp32) and decoding each block
// in registers, right where it is multiplied, cuts those bytes 6.4×.
//
// Exact mode: the activations stay fp32, and each weight is the value
// dequantize_row gives it, so the result differs from matmul() over the
// dequantized matrix only in summation order.
//
// Two versions, as for matmul: `quant_matmul_plain` decodes a row into
// floats and takes plain dot products, for reading and for checking;
// `quant_matmul` works block by block with SIMD (AVX2+FMA when the CPU has
// it, else portable loops), reuses each decoded block across a tile of
// tokens, and splits the rows over OpenMP threads.
#pragma once

#include <cstdint>

#include "kernels/cpu/ggml_types.h"

namespace servelab {

// A (rows, cols) weight matrix in a ggml block format, one output feature
// per row, rows stored back to back (as in a GGUF file). Not owned.
struct QuantMatrix {
    GgmlType type = GgmlType::kF32;
    const uint8_t* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;       // a multiple of the type's block size
    int64_t row_bytes = 0;  // row_size_bytes(type, cols)
};

// Whether quant_matmul has a fused kernel for `type` (others are decoded a
// row at a time, which is correct but no faster than fp32).
bool has_fused_kernel(GgmlType type);

// Which block kernels quant_matmul may use: the best this CPU has (AVX2+FMA
// on x86-64 when present), or only the portable loops every CPU runs (what
// ARM64 gets today; tests check both on any machine).
enum class QuantKernels { kBest, kPortable };

// x: (num_tokens, w.cols), y: (num_tokens, w.rows). y must not alias x.
void quant_matmul_plain(const float* x, const QuantMatrix& w, float* y, int64_t num_tokens);
void quant_matmul(const float* x, const QuantMatrix& w, float* y, int64_t num_tokens,
                  QuantKernels kernels = QuantKernels::kBest);

}  // namespace servelab
