// cholesky.h — the dense linear algebra GPTQ needs: Cholesky factors and an inverse.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ). Matrices are
// square, row-major, double. A symmetric positive definite A factors as
// A = L·Lᵀ with L lower triangular (Cholesky); GPTQ then wants H⁻¹ = Uᵀ·U
// with U upper triangular, the Cholesky factor of the inverse, transposed.
// Plain loops ordered so the innermost runs along a row; O(n³) each, about
// a second for n = 1536 on two cores.
#pragma once

#include <cstdint>
#include <vector>

namespace servelab {

// L with A = L·Lᵀ (the upper triangle of the result is 0). Throws
// servelab::Error naming the pivot when A is not positive definite.
std::vector<double> cholesky_lower(const std::vector<double>& a, int64_t n);

// A⁻¹ from A's Cholesky factor L: (L⁻¹)ᵀ·L⁻¹.
std::vector<double> inverse_from_cholesky(const std::vector<double>& lower, int64_t n);

// U upper triangular with A⁻¹ = Uᵀ·U, as float (what gptq_quantize_block reads).
std::vector<float> inverse_upper_factor(const std::vector<double>& a, int64_t n);

}  // namespace servelab
