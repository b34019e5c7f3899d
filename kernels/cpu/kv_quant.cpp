// kv_quant.cpp — see kv_quant.h. Lab 3's exercise: int8 quantize/dequantize.
#include "kernels/cpu/kv_quant.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/fp8.h"

namespace servelab {
namespace {

float max_magnitude(const float* x, int64_t n) {
    float largest = 0.0f;
    for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::fabs(x[i]));
    return largest;
}

}  // namespace

float quantize_int8_row(const float* x, int64_t n, int8_t* q) {
    // BEGIN SOLUTION lab03
    // HINT: scale = max |x| / 127 (0 for an all-zero row);
    // HINT: q = round(x / scale), clamped to [-127, 127]
    const float scale = max_magnitude(x, n) / 127.0f;
    if (scale == 0.0f) {
        std::fill(q, q + n, int8_t(0));
        return 0.0f;
    }
    const float inverse_scale = 1.0f / scale;
    for (int64_t i = 0; i < n; ++i) {
        const float code = std::nearbyint(x[i] * inverse_scale);
        q[i] = int8_t(std::clamp(code, -127.0f, 127.0f));
    }
    return scale;
    // END SOLUTION
}

void dequantize_int8_row(const int8_t* q, float scale, int64_t n, float* x) {
    // BEGIN SOLUTION lab03
    // HINT: x[i] = q[i] * scale
    for (int64_t i = 0; i < n; ++i) x[i] = float(q[i]) * scale;
    // END SOLUTION
}

float quantize_fp8_row(const float* x, int64_t n, uint8_t* q) {
    const float scale = max_magnitude(x, n) / kFp8E4M3Max;
    if (scale == 0.0f) {
        std::fill(q, q + n, uint8_t(0));
        return 0.0f;
    }
    const float inverse_scale = 1.0f / scale;
    for (int64_t i = 0; i < n; ++i) q[i] = float_to_fp8_e4m3(x[i] * inverse_scale);
    return scale;
}

void dequantize_fp8_row(const uint8_t* q, float scale, int64_t n, float* x) {
    for (int64_t i = 0; i < n; ++i) x[i] = fp8_e4m3_to_float(q[i]) * scale;
}

}  // namespace servelab
