// fused_add_rmsnorm.cpp — see fused_add_rmsnorm.h.
#include "kernels/cpu/fused_add_rmsnorm.h"

#include <cmath>

#include "kernels/cpu/fused_rmsnorm_quantize.h"
#include "kernels/cpu/parallel_for.h"

namespace servelab {

namespace {

constexpr int64_t kBlock = 32;  // values per int8 activation block

// x += delta over one row; returns rmsnorm's 1 / rms of the new row, its
// sum of squares taken in the same loop (in double and in order, as
// kernels/cpu/rmsnorm.cpp takes it: the same bits).
float add_row_rms_inverse(float* x, const float* delta, int64_t dim, float eps) {
    double sum_squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
        x[i] += delta[i];
        sum_squares += double(x[i]) * double(x[i]);
    }
    return float(1.0 / std::sqrt(sum_squares / double(dim) + double(eps)));
}

}  // namespace

void add_rmsnorm_rows(float* x, const float* delta, const float* weight, float* normed,
                      int64_t num_tokens, int64_t dim, float eps) {
    parallel_for(num_tokens, [&](int64_t t) {
        float* row = x + t * dim;
        float* out = normed + t * dim;
        const float inv_rms = add_row_rms_inverse(row, delta + t * dim, dim, eps);
        for (int64_t i = 0; i < dim; ++i) out[i] = row[i] * inv_rms * weight[i];
    });
}

void add_rmsnorm_quantize_rows(float* x, const float* delta, const float* weight,
                               int64_t num_tokens, int64_t dim, float eps,
                               QuantizedActivations& out) {
    resize_activations(out, num_tokens, dim);
    const int64_t blocks_per_row = dim / kBlock;
    parallel_for(num_tokens, [&](int64_t t) {
        float* row = x + t * dim;
        const float inv_rms = add_row_rms_inverse(row, delta + t * dim, dim, eps);
        int8_t* codes = out.codes.data() + t * dim;
        for (int64_t b = 0; b < blocks_per_row; ++b) {
            float normed[kBlock];  // one block of h, quantized while in registers
            for (int64_t i = 0; i < kBlock; ++i) {
                const int64_t at = b * kBlock + i;
                normed[i] = row[at] * inv_rms * weight[at];
            }
            quantize_activation_block(normed, codes + b * kBlock,
                                      out.scales.data() + t * blocks_per_row + b,
                                      out.scaled_sums.data() + t * blocks_per_row + b);
        }
    });
}

}  // namespace servelab
