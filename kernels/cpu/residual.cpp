// residual.cpp — see residual.h.
#include "kernels/cpu/residual.h"

namespace servelab {

void add_inplace(float* x, const float* delta, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) x[i] += delta[i];
}

}  // namespace servelab
