// output_error.cpp — see output_error.h.
#include "reference/quant/output_error.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace servelab {

double output_error(const float* delta, int64_t rows, int64_t cols, const float* hessian) {
    // (ΔW·H) row by row is one matmul: H is symmetric, so ΔW·Hᵀ = ΔW·H.
    std::vector<float> delta_times_h(size_t(rows * cols));
    matmul(delta, hessian, delta_times_h.data(), rows, cols, cols);
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* a = delta + r * cols;
        const float* b = delta_times_h.data() + r * cols;
        double row_sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) row_sum += double(a[c]) * double(b[c]);
        total += row_sum;
    }
    return total;
}

}  // namespace servelab
