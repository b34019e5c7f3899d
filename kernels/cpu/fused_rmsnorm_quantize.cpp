// fused_rmsnorm_quantize.cpp — see fused_rmsnorm_quantize.h.
#include "kernels/cpu/fused_rmsnorm_quantize.h"

#include <cmath>

#include "kernels/cpu/parallel_for.h"

namespace servelab {

namespace {
constexpr int64_t kBlock = 32;  // values per int8 activation block
}  // namespace

float rms_inverse(const float* x, int64_t dim, float eps) {
    // In double, in order, as kernels/cpu/rmsnorm.cpp does: the same bits.
    double sum_squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_squares += double(x[i]) * double(x[i]);
    return float(1.0 / std::sqrt(sum_squares / double(dim) + double(eps)));
}

void rmsnorm_quantize_row(const float* x, const float* weight, int64_t dim, float eps,
                          int8_t* codes, float* scales, float* scaled_sums) {
    const float inv_rms = rms_inverse(x, dim, eps);
    for (int64_t b = 0; b < dim / kBlock; ++b) {
        float normed[kBlock];  // one block of rmsnorm's output: registers / L1, never memory
        for (int64_t i = 0; i < kBlock; ++i) {
            const int64_t at = b * kBlock + i;
            normed[i] = x[at] * inv_rms * weight[at];
        }
        quantize_activation_block(normed, codes + b * kBlock, scales + b, scaled_sums + b);
    }
}

void rmsnorm_quantize_rows(const float* x, const float* weight, int64_t num_tokens, int64_t dim,
                           float eps, QuantizedActivations& out) {
    resize_activations(out, num_tokens, dim);
    const int64_t blocks_per_row = dim / kBlock;
    parallel_for(num_tokens, [&](int64_t t) {
        rmsnorm_quantize_row(x + t * dim, weight, dim, eps, out.codes.data() + t * dim,
                             out.scales.data() + t * blocks_per_row,
                             out.scaled_sums.data() + t * blocks_per_row);
    });
}

}  // namespace servelab
