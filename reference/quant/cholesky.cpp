// cholesky.cpp — see cholesky.h.
#include "reference/quant/cholesky.h"

#include <fmt/format.h>
#include <cstddef>

#include <cmath>

#include "kernels/common/error.h"

namespace servelab {

std::vector<double> cholesky_lower(const std::vector<double>& a, int64_t n) {
    std::vector<double> l(size_t(n * n), 0.0);
    for (int64_t j = 0; j < n; ++j) {
        const double* l_j = l.data() + j * n;
        double pivot = a[size_t(j * n + j)];
        for (int64_t k = 0; k < j; ++k) pivot -= l_j[k] * l_j[k];
        if (!(pivot > 0.0)) {
            throw Error(
                fmt::format("cholesky: the matrix is not positive definite (pivot {} is {:g}); "
                            "more damping or more calibration data makes it so",
                            j, pivot));
        }
        const double diagonal = std::sqrt(pivot);
        l[size_t(j * n + j)] = diagonal;
        // Column j below the diagonal: each entry is a dot product of two row prefixes.
#pragma omp parallel for schedule(static)
        for (int64_t i = j + 1; i < n; ++i) {
            const double* l_i = l.data() + i * n;
            double sum = a[size_t(i * n + j)];
            for (int64_t k = 0; k < j; ++k) sum -= l_i[k] * l_j[k];
            l[size_t(i * n + j)] = sum / diagonal;
        }
    }
    return l;
}

std::vector<double> inverse_from_cholesky(const std::vector<double>& lower, int64_t n) {
    // X = L⁻¹, row by row: row i of L·X = I gives X_i = (e_i − Σ_{k<i} L_ik X_k) / L_ii,
    // and row k of X is zero beyond column k.
    std::vector<double> x(size_t(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
        double* x_i = x.data() + i * n;
        x_i[i] = 1.0;
        for (int64_t k = 0; k < i; ++k) {
            const double factor = lower[size_t(i * n + k)];
            const double* x_k = x.data() + k * n;
            for (int64_t c = 0; c <= k; ++c) x_i[c] -= factor * x_k[c];
        }
        const double diagonal = lower[size_t(i * n + i)];
        for (int64_t c = 0; c <= i; ++c) x_i[c] /= diagonal;
    }
    // A⁻¹ = Xᵀ·X: entry (a, b) = Σ_k X_ka X_kb over k >= max(a, b).
    std::vector<double> inverse(size_t(n * n), 0.0);
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t a = 0; a < n; ++a) {
        double* out = inverse.data() + a * n;
        for (int64_t k = a; k < n; ++k) {
            const double* x_k = x.data() + k * n;
            const double x_ka = x_k[a];
            for (int64_t b = 0; b <= k; ++b) out[b] += x_ka * x_k[b];
        }
    }
    return inverse;
}

std::vector<float> inverse_upper_factor(const std::vector<double>& a, int64_t n) {
    const std::vector<double> inverse = inverse_from_cholesky(cholesky_lower(a, n), n);
    const std::vector<double> lower = cholesky_lower(inverse, n);  // A⁻¹ = L₂·L₂ᵀ
    std::vector<float> upper(size_t(n * n), 0.0f);                 // U = L₂ᵀ
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j <= i; ++j) upper[size_t(j * n + i)] = float(lower[size_t(i * n + j)]);
    }
    return upper;
}

}  // namespace servelab
