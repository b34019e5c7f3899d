// rmsnorm.cpp — see rmsnorm.h.
#include "kernels/cpu/rmsnorm.h"

#include <cmath>

#include "kernels/cpu/parallel_for.h"

namespace servelab {

void rmsnorm(const float* x, const float* weight, float* out, int64_t dim, float eps) {
    // BEGIN SOLUTION lab01
    // HINT: sum of squares (in double), inverse root mean square, then x * inv_rms * weight
    // The sum of squares is accumulated in double: dim is small (hundreds to
    // thousands), so this costs nothing and keeps the statistic exact enough
    // that fp32 results match the float64 numpy oracle to ~1e-7.
    double sum_squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_squares += double(x[i]) * double(x[i]);
    const float inv_rms = float(1.0 / std::sqrt(sum_squares / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv_rms * weight[i];
    // END SOLUTION
}

void rmsnorm_rows(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim,
                  float eps) {
    parallel_for(num_tokens,
                 [&](int64_t t) { rmsnorm(x + t * dim, weight, out + t * dim, dim, eps); });
}

}  // namespace servelab
