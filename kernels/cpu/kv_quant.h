// kv_quant.h — symmetric per-row int8 and fp8 quantization of KV vectors.
//
// Lab 3 (chapter 11.3, KV-cache quantization). One row is one head of one
// token (head_dim values). Symmetric quantization maps the row's largest
// magnitude to the largest code and keeps 0 exact:
//   scale = max_i |x_i| / 127,   q_i = round(x_i / scale) ∈ [-127, 127],
//   x̂_i  = q_i · scale,          |x_i − x̂_i| ≤ scale / 2.
// A per-row scale follows the row: keys of one head can be 10× larger than
// another's, and one scale for the whole cache would spend most codes on
// the largest head. fp8 (E4M3) works the same way with 448 as the largest
// code, trading the uniform grid for a floating one (more precision near 0).
#pragma once

#include <cstdint>

namespace servelab {

// Quantizes x[0..n) into q and returns the scale. An all-zero row gets scale
// 0 (and all-zero codes), which dequantizes back to exact zeros.
float quantize_int8_row(const float* x, int64_t n, int8_t* q);
// x̂[i] = q[i] · scale.
void dequantize_int8_row(const int8_t* q, float scale, int64_t n, float* x);

// The same with FP8 E4M3 codes (kernels/cpu/fp8.h): scale = max |x| / 448.
float quantize_fp8_row(const float* x, int64_t n, uint8_t* q);
void dequantize_fp8_row(const uint8_t* q, float scale, int64_t n, float* x);

}  // namespace servelab
