// group_quantizer.cpp — see group_quantizer.h. Lab 10's first exercise: RTN in groups.
#include "reference/quant/group_quantizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/parallel_for.h"

namespace servelab {
namespace {

// The number a GGUF block really stores for `value`.
float round_to_fp16(float value) {
    return fp16_to_float(float_to_fp16(value));
}

}  // namespace

GroupParams fit_group(const float* weights, int64_t count, const QuantScheme& scheme) {
    // BEGIN SOLUTION lab10 (fit_group)
    // HINT: symmetric: find the weight of largest magnitude m (keep its sign; of equal
    // HINT: magnitudes the first) and set scale = m / min_code(), so m itself lands on the
    // HINT: end code; offset stays 0.
    // HINT: asymmetric: scale = (max − min) / max_code(), offset = min. Round both through
    // HINT: fp16 (round_to_fp16) — that is what a block stores.
    GroupParams params;
    if (scheme.symmetric) {
        float largest = 0.0f;
        for (int64_t i = 0; i < count; ++i) {
            if (std::fabs(weights[i]) > std::fabs(largest)) largest = weights[i];
        }
        params.scale = round_to_fp16(largest / float(scheme.min_code()));
        return params;
    }
    float min = weights[0];
    float max = weights[0];
    for (int64_t i = 1; i < count; ++i) {
        min = std::min(min, weights[i]);
        max = std::max(max, weights[i]);
    }
    params.scale = round_to_fp16((max - min) / float(scheme.max_code()));
    params.offset = round_to_fp16(min);
    return params;
    // END SOLUTION
}

int quantize_weight(float weight, const GroupParams& params, const QuantScheme& scheme) {
    // BEGIN SOLUTION lab10 (quantize_weight)
    // HINT: the inverse of dequantize_code: (weight − offset) / scale, rounded to the
    // HINT: nearest integer and clamped to [min_code(), max_code()]. A zero scale (a
    // HINT: group of equal weights) has one value only, which every code stands for:
    // HINT: return code 0.
    if (params.scale == 0.0f) return 0;
    const float scaled = (weight - params.offset) / params.scale;
    const auto code = static_cast<int>(std::lround(scaled));
    return std::clamp(code, scheme.min_code(), scheme.max_code());
    // END SOLUTION
}

void rtn_quantize_row(const float* weights, float* out, GroupParams* params, int64_t cols,
                      const QuantScheme& scheme) {
    // BEGIN SOLUTION lab10 (rtn_quantize_row)
    // HINT: group by group (scheme.num_groups, group_length: the last may be shorter):
    // HINT: fit_group on the group's weights, then each of its weights becomes
    // HINT: dequantize_code(quantize_weight(...)). Store the group's parameters in
    // HINT: params[group] when params is not null. Fit before writing: out may alias
    // HINT: weights.
    for (int64_t group = 0; group < scheme.num_groups(cols); ++group) {
        const int64_t first = group * scheme.group_size;
        const int64_t length = scheme.group_length(first, cols);
        const GroupParams fitted = fit_group(weights + first, length, scheme);
        for (int64_t i = first; i < first + length; ++i) {
            out[i] = dequantize_code(quantize_weight(weights[i], fitted, scheme), fitted);
        }
        if (params != nullptr) params[group] = fitted;
    }
    // END SOLUTION
}

void rtn_quantize_matrix(const float* weights, float* out, GroupParams* params, int64_t rows,
                         int64_t cols, const QuantScheme& scheme) {
    const int64_t groups_per_row = scheme.num_groups(cols);
    // parallel_for, not a bare omp loop: the exercise may throw (NotImplemented).
    parallel_for(rows, [&](int64_t row) {
        rtn_quantize_row(weights + row * cols, out + row * cols,
                         params == nullptr ? nullptr : params + row * groups_per_row, cols, scheme);
    });
}

double bits_per_weight(const QuantScheme& scheme) {
    const int params_bits = scheme.symmetric ? 16 : 32;
    return scheme.bits + double(params_bits) / double(scheme.group_size);
}

}  // namespace servelab
