// gptq_test.cpp — GPTQ (Lab 10's third exercise) against the least-squares optimum it promises.
//
// GptqBlock.* grade reference/quant/gptq_block.cpp. GPTQ's promise is that
// after columns 0 .. i−1 of a row are quantized, the columns not yet
// quantized hold the weights that change the layer's outputs least given
// those: the minimiser over the free columns of (w − w₀)·H·(w − w₀)ᵀ with
// the quantized ones fixed. The tests solve that small least-squares problem
// directly (Gaussian elimination in double, no Cholesky factor involved) at
// every column and check the block's choices against it: the weight each
// column is quantized from, its code, its group's parameters, its error.
// GptqMatrix.* check the driver (damping, the lazy batch, dead inputs) and
// that GPTQ beats RTN where inputs correlate; Cholesky.* the factor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "reference/quant/cholesky.h"
#include "reference/quant/gptq.h"
#include "reference/quant/gptq_block.h"
#include "reference/quant/group_quantizer.h"
#include "reference/quant/output_error.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

// H = (1/n) XᵀX + λI for inputs whose channels correlate (X = Z·A, A random
// mixing), damped as gptq.h damps: λ = 1% of the mean diagonal.
std::vector<double> correlated_hessian(RandomSource& random, int64_t cols) {
    const int64_t tokens = 3 * cols;
    const std::vector<float> z = random.normal(size_t(tokens * cols));
    const std::vector<float> a = random.normal(size_t(cols * cols), 1.0f / std::sqrt(float(cols)));
    std::vector<double> x(size_t(tokens * cols), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t k = 0; k < cols; ++k) {
            const double zk = z[size_t(t * cols + k)];
            for (int64_t j = 0; j < cols; ++j)
                x[size_t(t * cols + j)] += zk * a[size_t(k * cols + j)];
        }
        for (int64_t j = 0; j < cols; ++j) x[size_t(t * cols + j)] += 0.3 * z[size_t(t * cols + j)];
    }
    std::vector<double> h(size_t(cols * cols), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < cols; ++i) {
            for (int64_t j = 0; j < cols; ++j) {
                h[size_t(i * cols + j)] +=
                    x[size_t(t * cols + i)] * x[size_t(t * cols + j)] / tokens;
            }
        }
    }
    double trace = 0.0;
    for (int64_t i = 0; i < cols; ++i) trace += h[size_t(i * cols + i)];
    for (int64_t i = 0; i < cols; ++i) h[size_t(i * cols + i)] += 0.01 * trace / double(cols);
    return h;
}

// Solves A·x = b (n × n, row-major) by Gaussian elimination with partial pivoting.
std::vector<double> solve(std::vector<double> a, std::vector<double> b, int64_t n) {
    for (int64_t c = 0; c < n; ++c) {
        int64_t pivot = c;
        for (int64_t r = c + 1; r < n; ++r) {
            if (std::fabs(a[size_t(r * n + c)]) > std::fabs(a[size_t(pivot * n + c)])) pivot = r;
        }
        for (int64_t k = 0; k < n; ++k) std::swap(a[size_t(c * n + k)], a[size_t(pivot * n + k)]);
        std::swap(b[size_t(c)], b[size_t(pivot)]);
        for (int64_t r = c + 1; r < n; ++r) {
            const double f = a[size_t(r * n + c)] / a[size_t(c * n + c)];
            for (int64_t k = c; k < n; ++k) a[size_t(r * n + k)] -= f * a[size_t(c * n + k)];
            b[size_t(r)] -= f * b[size_t(c)];
        }
    }
    std::vector<double> x(static_cast<size_t>(n));
    for (int64_t r = n - 1; r >= 0; --r) {
        double s = b[size_t(r)];
        for (int64_t k = r + 1; k < n; ++k) s -= a[size_t(r * n + k)] * x[size_t(k)];
        x[size_t(r)] = s / a[size_t(r * n + r)];
    }
    return x;
}

// The weights of columns `fixed` .. cols − 1 that minimise (w − w₀)·H·(w − w₀)ᵀ
// when columns 0 .. fixed − 1 are held at `quantized`: with d = w − w₀,
// H_ff·d_f = −H_fq·(q − w₀)_q over the free (f) and quantized (q) columns.
std::vector<double> least_squares_rest(const std::vector<double>& h, int64_t cols,
                                       const std::vector<float>& w0,
                                       const std::vector<float>& quantized, int64_t fixed) {
    const int64_t free = cols - fixed;
    std::vector<double> a(size_t(free * free)), b(size_t(free), 0.0);
    for (int64_t i = 0; i < free; ++i) {
        for (int64_t j = 0; j < free; ++j)
            a[size_t(i * free + j)] = h[size_t((fixed + i) * cols + fixed + j)];
        for (int64_t q = 0; q < fixed; ++q) {
            b[size_t(i)] -=
                h[size_t((fixed + i) * cols + q)] * (double(quantized[size_t(q)]) - w0[size_t(q)]);
        }
    }
    std::vector<double> rest = solve(a, b, free);
    for (int64_t i = 0; i < free; ++i) rest[size_t(i)] += w0[size_t(fixed + i)];
    return rest;
}

std::string grid_name(const QuantScheme& s) {
    return std::to_string(s.bits) + "-bit " + (s.symmetric ? "symmetric" : "asymmetric") +
           ", groups of " + std::to_string(s.group_size);
}

// One block [0, last) of a row, checked column by column against the direct
// least-squares optimum; then the columns after the block, which the block
// must leave alone, receive its errors (the lazy batch) and are checked too.
void check_block_against_least_squares(RandomSource& random, const QuantScheme& scheme,
                                       int64_t cols, int64_t last) {
    SCOPED_TRACE(grid_name(scheme) + ", " + std::to_string(cols) + " columns, block [0, " +
                 std::to_string(last) + ")");
    const std::vector<double> h = correlated_hessian(random, cols);
    const std::vector<float> u = inverse_upper_factor(h, cols);
    const std::vector<float> w0 = random.normal(size_t(cols), 0.1f);
    std::vector<float> row = w0;
    std::vector<GroupParams> params(size_t(scheme.num_groups(cols)), GroupParams{NAN, NAN});
    std::vector<float> errors(size_t(last), NAN);
    gptq_quantize_block(row.data(), cols, u.data(), 0, last, scheme, params.data(), errors.data());

    for (int64_t j = last; j < cols; ++j) {
        ASSERT_EQ(row[size_t(j)], w0[size_t(j)])
            << "column " << j << " is past the block [0, " << last
            << ") but was changed: the block updates only its own columns (j < last); the later "
               "ones receive the block's errors all at once afterwards (the lazy batch), so an "
               "update here would be applied twice";
    }
    for (int64_t i = 0; i < last; ++i) {
        // What column i must have held when its turn came: the optimum given columns < i.
        const double current = i == 0 ? double(w0[0]) : least_squares_rest(h, cols, w0, row, i)[0];
        const int64_t group = i / scheme.group_size;
        if (i % scheme.group_size == 0) {
            std::vector<float> group_now(size_t(scheme.group_length(i, cols)));
            const std::vector<double> rest = i == 0 ? std::vector<double>(w0.begin(), w0.end())
                                                    : least_squares_rest(h, cols, w0, row, i);
            for (size_t k = 0; k < group_now.size(); ++k) group_now[k] = float(rest[k]);
            const GroupParams want = fit_group(group_now.data(), int64_t(group_now.size()), scheme);
            const GroupParams original =
                fit_group(w0.data() + i, int64_t(group_now.size()), scheme);
            const GroupParams& got = params[size_t(group)];
            const bool close = std::fabs(got.scale - want.scale) <= 1e-3f * std::fabs(want.scale) &&
                               std::fabs(got.offset - want.offset) <= 1e-3f * std::fabs(want.scale);
            ASSERT_TRUE(close)
                << "group " << group << " (from column " << i << "): params (" << got.scale << ", "
                << got.offset << ") where (" << want.scale << ", " << want.offset << ") is expected"
                << (got.scale == original.scale && got.offset == original.offset
                        ? ": they were fitted on the row's original weights; fit them on its "
                          "current weights when the group's first column is reached, since those "
                          "carry the earlier columns' updates"
                        : "");
        }
        const GroupParams& p = params[size_t(group)];
        const float q = row[size_t(i)];
        const int code = quantize_weight(q, p, scheme);
        ASSERT_NEAR(dequantize_code(code, p), q, 1e-4 * std::fabs(p.scale))
            << "column " << i << " holds " << q << ", which is not on its group's grid";
        // The nearest grid value to `current` (either one at a near tie).
        const double step = std::fabs(p.scale);
        double best = 1e30;
        for (int c = scheme.min_code(); c <= scheme.max_code(); ++c) {
            best = std::min(best, std::fabs(double(dequantize_code(c, p)) - current));
        }
        ASSERT_LE(std::fabs(double(q) - current), best + 2e-3 * step)
            << "column " << i << ": its weight was " << current << " when its turn came (the "
            << "least-squares optimum given the columns before it), and it was quantized to " << q
            << "; the nearest grid value is " << best
            << " away. Quantize the row's current weight, "
               "after the earlier columns' updates";
        const double u_ii = u[size_t(i * cols + i)];
        const double want_error = (current - double(q)) / u_ii;
        if (std::fabs(double(errors[size_t(i)]) - (current - double(q))) <
                1e-3 * std::fabs(want_error) &&
            std::fabs(u_ii - 1.0) > 1e-2) {
            FAIL() << "column " << i << ": errors[" << i << "] = " << errors[size_t(i)]
                   << " is w − q, not divided by U_ii = " << u_ii
                   << ". The update is e = (w_i − q_i) / U_ii and w_j −= e · U_ij: without the "
                      "division the later columns receive a wrongly sized correction";
        }
        ASSERT_NEAR(errors[size_t(i)], want_error, 2e-3 * std::fabs(want_error) + 1e-5)
            << "column " << i << ": e = (w_i − q_i) / U_ii, U the upper factor of H⁻¹";
    }
    // The lazy batch, applied here as gptq.cpp does, leaves the rest at the optimum too.
    for (int64_t k = 0; k < last; ++k) {
        for (int64_t j = last; j < cols; ++j)
            row[size_t(j)] -= errors[size_t(k)] * u[size_t(k * cols + j)];
    }
    const std::vector<double> rest = least_squares_rest(h, cols, w0, row, last);
    for (int64_t j = last; j < cols; ++j) {
        ASSERT_NEAR(row[size_t(j)], rest[size_t(j - last)],
                    2e-3 * std::fabs(rest[size_t(j - last)]) + 2e-4)
            << "column " << j
            << ", after the block's errors reached it: the columns not yet "
               "quantized must hold the least-squares optimum given the quantized ones";
    }
}

TEST(GptqBlock, EveryColumnIsQuantizedFromTheLeastSquaresOptimumOfTheOnesBefore) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    check_block_against_least_squares(
        random, QuantScheme{.bits = 4, .symmetric = true, .group_size = 16}, 64, 32);
    check_block_against_least_squares(
        random, QuantScheme{.bits = 3, .symmetric = false, .group_size = 8}, 48, 40);
    check_block_against_least_squares(
        random, QuantScheme{.bits = 2, .symmetric = true, .group_size = 32}, 64, 64);
}

TEST(GptqBlock, ABlockInTheMiddleOfARowReadsOnlyItsRows) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    // Quantizing [first, last) with the factor poisoned outside rows first..last−1:
    // only U_ij with first <= i < last, j >= i may be read.
    const QuantScheme scheme{.bits = 4, .symmetric = false, .group_size = 16};
    const int64_t cols = 64, first = 16, last = 48;
    const std::vector<double> h = correlated_hessian(random, cols);
    std::vector<float> u = inverse_upper_factor(h, cols);
    for (int64_t i = 0; i < cols; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
            if (i < first || i >= last || j < i) u[size_t(i * cols + j)] = NAN;
        }
    }
    std::vector<float> row = random.normal(size_t(cols), 0.1f);
    const std::vector<float> before = row;
    std::vector<GroupParams> params(size_t(scheme.num_groups(cols)), GroupParams{NAN, NAN});
    std::vector<float> errors(size_t(last - first), NAN);
    gptq_quantize_block(row.data(), cols, u.data(), first, last, scheme, params.data(),
                        errors.data());
    for (int64_t j = 0; j < cols; ++j) {
        ASSERT_FALSE(std::isnan(row[size_t(j)]))
            << "column " << j << " became NaN: the block read U outside its rows [" << first << ", "
            << last << ") or below the diagonal";
        if (j < first || j >= last) {
            ASSERT_EQ(row[size_t(j)], before[size_t(j)])
                << "column " << j << " is outside the block";
        }
    }
    for (int64_t k = 0; k < last - first; ++k) {
        ASSERT_FALSE(std::isnan(errors[size_t(k)]))
            << "errors[" << k << "] (column " << first + k << ") was not written";
    }
    for (int64_t g = first / 16; g < last / 16; ++g) {
        ASSERT_FALSE(std::isnan(params[size_t(g)].scale))
            << "group " << g << "'s params were not written";
    }
}

// ---------------------------------------------------------------- the driver

double error_against(const std::vector<float>& w, const std::vector<float>& q, int64_t rows,
                     int64_t cols, const std::vector<float>& h) {
    std::vector<float> delta(w.size());
    for (size_t k = 0; k < w.size(); ++k) delta[k] = w[k] - q[k];
    return output_error(delta.data(), rows, cols, h.data());
}

TEST(GptqMatrix, BeatsRtnWhereInputsCorrelate) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const double kMargin = 0.75;  // GPTQ's output error at most 75% of RTN's
    for (const QuantScheme& scheme :
         {QuantScheme{.bits = 4, .symmetric = true, .group_size = 32},
          QuantScheme{.bits = 3, .symmetric = false, .group_size = 64}}) {
        const int64_t rows = 48, cols = 128;
        const std::vector<double> h64 = correlated_hessian(random, cols);
        const std::vector<float> h(h64.begin(), h64.end());
        const std::vector<float> w = random.normal(size_t(rows * cols), 0.05f);
        const GptqResult gptq = gptq_quantize_matrix(w.data(), rows, cols, h.data(), scheme);
        std::vector<float> rtn(w.size());
        rtn_quantize_matrix(w.data(), rtn.data(), nullptr, rows, cols, scheme);
        const double gptq_error = error_against(w, gptq.values, rows, cols, h);
        const double rtn_error = error_against(w, rtn, rows, cols, h);
        EXPECT_LT(gptq_error, kMargin * rtn_error) << grid_name(scheme) << ": GPTQ's output error "
                                                   << gptq_error << " against RTN's " << rtn_error;
        // Every value is on its group's grid (what the file will store).
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < cols; ++j) {
                const GroupParams& p =
                    gptq.params[size_t(r * scheme.num_groups(cols) + j / scheme.group_size)];
                const float v = gptq.values[size_t(r * cols + j)];
                ASSERT_NEAR(dequantize_code(quantize_weight(v, p, scheme), p), v,
                            1e-4 * std::fabs(p.scale))
                    << "row " << r << ", column " << j << " is off its group's grid";
            }
        }
    }
}

TEST(GptqMatrix, TheLazyBatchChangesNothingButTheOrderOfWork) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const QuantScheme scheme{.bits = 4, .symmetric = false, .group_size = 32};
    const int64_t rows = 8, cols = 256;
    const std::vector<double> h64 = correlated_hessian(random, cols);
    const std::vector<float> h(h64.begin(), h64.end());
    const std::vector<float> w = random.normal(size_t(rows * cols), 0.05f);
    const GptqResult whole = gptq_quantize_matrix(w.data(), rows, cols, h.data(), scheme,
                                                  {.damping = 0.01, .block_size = cols});
    const GptqResult batched = gptq_quantize_matrix(w.data(), rows, cols, h.data(), scheme,
                                                    {.damping = 0.01, .block_size = 64});
    const double whole_error = error_against(w, whole.values, rows, cols, h);
    const double batched_error = error_against(w, batched.values, rows, cols, h);
    EXPECT_NEAR(batched_error, whole_error, 0.02 * whole_error)
        << "blocks of 64 columns and one block of all columns are the same arithmetic reordered";
}

TEST(GptqMatrix, DeadInputChannelsGetZeroWeights) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const QuantScheme scheme{.bits = 4, .symmetric = true, .group_size = 32};
    const int64_t rows = 4, cols = 64;
    std::vector<double> h64 = correlated_hessian(random, cols);
    for (int64_t j = 0; j < cols; ++j) {  // channel 5 never fired
        h64[size_t(5 * cols + j)] = 0.0;
        h64[size_t(j * cols + 5)] = 0.0;
    }
    const std::vector<float> h(h64.begin(), h64.end());
    const std::vector<float> w = random.normal(size_t(rows * cols), 0.05f);
    const GptqResult result = gptq_quantize_matrix(w.data(), rows, cols, h.data(), scheme);
    for (int64_t r = 0; r < rows; ++r) {
        EXPECT_EQ(result.values[size_t(r * cols + 5)], 0.0f) << "row " << r;
        for (int64_t j = 0; j < cols; ++j)
            ASSERT_TRUE(std::isfinite(result.values[size_t(r * cols + j)]));
    }
}

TEST(Cholesky, InverseUpperFactorGivesTheInverse) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t n = 40;
    const std::vector<double> a = correlated_hessian(random, n);
    const std::vector<float> u = inverse_upper_factor(a, n);
    // (UᵀU)·A = I, and U is upper triangular.
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < i; ++j) ASSERT_EQ(u[size_t(i * n + j)], 0.0f) << i << "," << j;
    }
    for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double v = 0.0;
            for (int64_t k = 0; k < n; ++k) {
                double inv_ik = 0.0;
                for (int64_t m = 0; m < n; ++m)
                    inv_ik += double(u[size_t(m * n + i)]) * u[size_t(m * n + k)];
                v += inv_ik * a[size_t(k * n + j)];
            }
            ASSERT_NEAR(v, i == j ? 1.0 : 0.0, 2e-3) << "(UᵀU·A)[" << i << "][" << j << "]";
        }
    }
    std::vector<double> not_definite(size_t(4), 0.0);
    not_definite[0] = 1.0;
    not_definite[3] = -1.0;
    const std::string message = test::error_of([&] { cholesky_lower(not_definite, 2); });
    EXPECT_NE(message.find("pivot 1"), std::string::npos) << message;
}

}  // namespace
}  // namespace servelab
