// hidden_lab10_weight_quantization_test.cpp — Lab 10 (weight quantization;
// chapter 11.7, GPTQ and AWQ): the instructor's hidden tests of RTN, AWQ's
// scales and search, and GPTQ's block update.
//
// These are the course autograder's hidden tests: they are left out of the
// student release, so never quote them in handouts. They check the contracts
// the handout states on inputs the public tests do not use: bit widths 2 to 8
// of both grids, group sizes that are not powers of two and rows a group does
// not divide (or shorter than one group), quantizing in place, AWQ at other
// exponents and grid sizes, and a GPTQ block in the middle of a row with a
// group size and a block that differ from the public ones. Each expected
// value is computed here from the formula (a plain loop in the test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "kernels/cpu/dequantize.h"
#include "reference/quant/awq_search.h"
#include "reference/quant/gptq_block.h"
#include "reference/quant/group_quantizer.h"
#include "reference/quant/output_error.h"

namespace servelab {
namespace {

using test::RandomSource;

float fp16_round(float x) {
    return fp16_to_float(float_to_fp16(x));
}

std::string describe(const QuantScheme& s) {
    return std::to_string(s.bits) + " bits, " + (s.symmetric ? "symmetric" : "asymmetric") +
           ", groups of " + std::to_string(s.group_size);
}

// The handout's grid for one group, computed here: symmetric d = m / −2^(b−1)
// (m the first weight of largest magnitude), asymmetric d = (max − min) /
// (2^b − 1) and offset min, both rounded to fp16.
GroupParams expected_params(const float* w, int64_t n, const QuantScheme& s) {
    GroupParams p;
    if (s.symmetric) {
        float m = 0;
        for (int64_t i = 0; i < n; ++i)
            if (std::fabs(w[i]) > std::fabs(m)) m = w[i];
        p.scale = fp16_round(m / -float(1 << (s.bits - 1)));
        return p;
    }
    const float lo = *std::min_element(w, w + n), hi = *std::max_element(w, w + n);
    p.scale = fp16_round((hi - lo) / float((1 << s.bits) - 1));
    p.offset = fp16_round(lo);
    return p;
}

// The value nearest to w on the grid p (codes clamped to the scheme's range).
double nearest_on_grid(float w, const GroupParams& p, const QuantScheme& s) {
    const int lo = s.symmetric ? -(1 << (s.bits - 1)) : 0;
    const int hi = s.symmetric ? (1 << (s.bits - 1)) - 1 : (1 << s.bits) - 1;
    double best = 0, distance = INFINITY;
    for (int c = lo; c <= hi; ++c) {
        const double v = double(c) * p.scale + p.offset;
        if (std::fabs(v - w) < distance) distance = std::fabs(v - w), best = v;
    }
    return best;
}

// RTN of one row as the handout defines it, in the test.
std::vector<float> expected_rtn(const std::vector<float>& w, const QuantScheme& s) {
    std::vector<float> out(w.size());
    const int64_t cols = int64_t(w.size());
    for (int64_t first = 0; first < cols; first += s.group_size) {
        const int64_t n = std::min(s.group_size, cols - first);
        const GroupParams p = expected_params(w.data() + first, n, s);
        for (int64_t i = first; i < first + n; ++i)
            out[size_t(i)] = float(nearest_on_grid(w[size_t(i)], p, s));
    }
    return out;
}

// Checks one RTN row (quantized in place: out aliases weights) group by group.
void check_rtn_row(RandomSource& rng, const QuantScheme& s, int64_t cols) {
    const std::vector<float> w = rng.normal(size_t(cols), 0.05f);
    std::vector<float> row = w;  // in place
    std::vector<GroupParams> params(size_t(s.num_groups(cols)) + 1, GroupParams{NAN, NAN});
    rtn_quantize_row(row.data(), row.data(), params.data(), cols, s);
    const std::vector<float> want = expected_rtn(w, s);
    for (int64_t g = 0; g < s.num_groups(cols); ++g) {
        const GroupParams p = expected_params(w.data() + g * s.group_size,
                                              std::min(s.group_size, cols - g * s.group_size), s);
        ASSERT_TRUE(params[size_t(g)].scale == p.scale && params[size_t(g)].offset == p.offset)
            << describe(s) << ", " << cols << " columns, group " << g << ": params ("
            << params[size_t(g)].scale << ", " << params[size_t(g)].offset << "), expected ("
            << p.scale << ", " << p.offset << "): the grid is fitted on the group's own "
            << "weights (the last group is the shorter rest of the row), rounded to fp16";
    }
    ASSERT_TRUE(std::isnan(params.back().scale))
        << describe(s) << ", " << cols << " columns: params written past num_groups(cols)";
    for (int64_t i = 0; i < cols; ++i) {
        const float tolerance = 1e-3f * std::fabs(params[size_t(i / s.group_size)].scale);
        ASSERT_NEAR(row[size_t(i)], want[size_t(i)], tolerance)
            << describe(s) << ", " << cols << " columns, quantized in place, column " << i
            << " (weight " << w[size_t(i)] << "): not the nearest value of its group's grid "
            << "(code clamped to the range; the group fitted before its weights are overwritten)";
    }
}

TEST(HiddenLab10Rtn, EveryBitWidthAndGroupSizeQuantizesInPlaceToTheNearestValue) {
    RandomSource rng(1001);
    SCOPED_TRACE(rng.trace());
    for (int bits : {2, 3, 5, 6, 7, 8}) {
        for (bool symmetric : {true, false}) {
            for (auto [group, cols] : {std::pair<int64_t, int64_t>{24, 100}, {48, 48}, {20, 13}}) {
                check_rtn_row(rng, QuantScheme{bits, symmetric, group}, cols);
            }
        }
    }
}

// Two weights of the largest magnitude and opposite signs: the first one
// sets the scale (and so its sign), as llama.cpp's quantizers pick.
void expect_first_of_equal_magnitudes_sets_the_sign(RandomSource& rng, const QuantScheme& s) {
    std::vector<float> w = rng.uniform(11, -0.2f, 0.2f);
    const int64_t first = rng.integer(0, 4), second = rng.integer(5, 10);
    w[size_t(first)] = rng.integer(0, 1) ? 0.5f : -0.5f;
    w[size_t(second)] = -w[size_t(first)];
    const GroupParams p = fit_group(w.data(), 11, s);
    EXPECT_EQ(p.scale, fp16_round(w[size_t(first)] / float(s.min_code())))
        << describe(s) << ": weights " << w[size_t(first)] << " (index " << first << ") and "
        << w[size_t(second)] << " (index " << second << ") share the largest magnitude; the "
        << "first of equals sets d = m / −2^(b−1)";
}

// A weight outside the group's grid (the grid was fitted on other weights)
// clamps to the end code; a scale of 0 gives code 0; codes are the nearest.
TEST(HiddenLab10Rtn, QuantizeWeightRoundsToTheNearestCodeAndClamps) {
    RandomSource rng(1002);
    SCOPED_TRACE(rng.trace());
    for (int bits : {3, 6}) {
        for (bool symmetric : {true, false}) {
            const QuantScheme s{bits, symmetric, 16};
            const std::vector<float> w = rng.normal(16, 0.1f);
            const GroupParams p = expected_params(w.data(), 16, s);
            for (float x : rng.uniform(200, -0.6f, 0.6f)) {
                const int code = quantize_weight(x, p, s);
                ASSERT_NEAR(double(code) * p.scale + p.offset, nearest_on_grid(x, p, s),
                            1e-3 * std::fabs(p.scale))
                    << describe(s) << ": weight " << x << " got code " << code << " on the grid "
                    << "(" << p.scale << ", " << p.offset << "): the nearest code, clamped to ["
                    << s.min_code() << ", " << s.max_code() << "]";
            }
            EXPECT_EQ(quantize_weight(0.3f, GroupParams{0.0f, 0.3f}, s), 0)
                << describe(s) << ": a zero scale (a group of equal weights) gives code 0";
            if (symmetric) expect_first_of_equal_magnitudes_sets_the_sign(rng, s);
        }
    }
}

// AWQ's scales at exponents and channel counts of its own: the formula, and
// max·min = 1 after the centring.
TEST(HiddenLab10Awq, ScalesFollowTheFormulaAtAnyExponent) {
    RandomSource rng(1003);
    SCOPED_TRACE(rng.trace());
    for (double alpha : {0.0, 0.37, 0.85, 1.0}) {
        const int64_t cols = 37;
        std::vector<float> mean_abs = rng.uniform(size_t(cols), 0.01f, 3.0f);
        mean_abs[5] = 0.0f;  // a dead channel: clamped to 1e-4
        // Both end at an inaccessible page: a loop past channel cols − 1 stops the test.
        const test::GuardedArray<float> guarded_mean(mean_abs);
        test::GuardedArray<float> scales(static_cast<size_t>(cols));
        awq_scales_for_alpha(guarded_mean.data(), cols, alpha, scales.data());
        double hi = 0, lo = INFINITY;
        for (float m : mean_abs) {
            const double s = std::pow(std::max(double(m), 1e-4), alpha);
            hi = std::max(hi, s), lo = std::min(lo, s);
        }
        for (int64_t j = 0; j < cols; ++j) {
            const double want =
                std::pow(std::max(double(mean_abs[size_t(j)]), 1e-4), alpha) / std::sqrt(hi * lo);
            ASSERT_NEAR(scales[size_t(j)], want, 1e-5 * want)
                << "alpha " << alpha << ", channel " << j << " (mean |x| " << mean_abs[size_t(j)]
                << "): s_j = max(mean|x_j|, 1e-4)^alpha / sqrt(max s · min s)";
        }
    }
}

// The effective weights Q(W·diag(s))·diag(s)⁻¹ on a non-square layer whose
// rows the groups do not divide, and the search over a grid of 7: every
// error recorded, the smallest kept.
TEST(HiddenLab10Awq, EffectiveWeightsAndTheSearchOverAnotherGrid) {
    RandomSource rng(1004);
    SCOPED_TRACE(rng.trace());
    const int64_t rows = 5, cols = 40;
    const QuantScheme s{3, false, 16};
    const std::vector<float> w = rng.normal(size_t(rows * cols), 0.1f);
    std::vector<float> mean_abs = rng.uniform(size_t(cols), 0.05f, 0.3f);
    mean_abs[3] = 6.0f, mean_abs[22] = 4.0f;  // salient channels, the last one too:
    mean_abs[cols - 1] = 5.0f;                // every entry of the error must count
    std::vector<float> h(size_t(cols * cols), 0.0f);
    for (int64_t j = 0; j < cols; ++j)
        h[size_t(j * cols + j)] = mean_abs[size_t(j)] * mean_abs[size_t(j)];
    const AwqScales found =
        awq_search_scales(w.data(), rows, cols, mean_abs.data(), h.data(), s, 7);
    ASSERT_EQ(found.error_by_grid.size(), 7u) << "num_grid 7: one error per α = i / 7";
    double best = INFINITY, best_alpha = -1;
    std::vector<float> best_scales;
    for (int i = 0; i < 7; ++i) {
        std::vector<float> scales(static_cast<size_t>(cols));
        awq_scales_for_alpha(mean_abs.data(), cols, i / 7.0, scales.data());
        const test::GuardedArray<float> guarded_w(w), guarded_scales(scales);
        const std::vector<float> scaled_weights =
            awq_effective_weights(guarded_w.data(), rows, cols, guarded_scales.data(), s);
        std::vector<float> delta(w.size());
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<float> scaled(static_cast<size_t>(cols));
            for (int64_t j = 0; j < cols; ++j)
                scaled[size_t(j)] = w[size_t(r * cols + j)] * scales[size_t(j)];
            const std::vector<float> q = expected_rtn(scaled, s);
            for (int64_t j = 0; j < cols; ++j) {
                const double want = q[size_t(j)] / scales[size_t(j)];
                ASSERT_NEAR(scaled_weights[size_t(r * cols + j)], want,
                            1e-3 * std::fabs(want) + 1e-6)
                    << "α = " << i << "/7, row " << r << ", column " << j << ": the scaled_weights "
                    << "weight is Q(w·s_j)/s_j (scale the column, quantize, divide back)";
                delta[size_t(r * cols + j)] =
                    w[size_t(r * cols + j)] - scaled_weights[size_t(r * cols + j)];
            }
        }
        const double error = output_error(delta.data(), rows, cols, h.data());
        ASSERT_NEAR(found.error_by_grid[size_t(i)], error, 1e-6 * error + 1e-12)
            << "error_by_grid[" << i << "] must be the output error at α = " << i << "/7";
        if (error < best) best = error, best_alpha = i / 7.0, best_scales = scales;
    }
    EXPECT_EQ(found.scales, best_scales) << "the scales kept must be those of the α kept";
    EXPECT_NEAR(found.alpha, best_alpha, 1e-9)
        << "the α kept must be the first of the smallest error";
    EXPECT_NEAR(found.output_error, best, 1e-6 * best);
    EXPECT_NEAR(found.rtn_output_error, found.error_by_grid[0], 1e-12)
        << "rtn_output_error is α = 0's";
}

// A random upper factor U with a positive diagonal far from 1.
std::vector<float> random_upper(RandomSource& rng, int64_t cols) {
    std::vector<float> u(size_t(cols * cols), 0.0f);
    for (int64_t i = 0; i < cols; ++i) {
        u[size_t(i * cols + i)] = float(rng.integer(20, 60)) / 10.0f;
        for (int64_t j = i + 1; j < cols; ++j) u[size_t(i * cols + j)] = rng.normal(1, 0.5f)[0];
    }
    return u;
}

// GPTQ on columns [first, last) in the middle of a row, the test's own loop
// beside it: the same values and errors column by column, the params of the
// block's groups only, and nothing outside [first, last) touched.
TEST(HiddenLab10Gptq, ABlockInTheMiddleEqualsTheUpdateColumnByColumn) {
    RandomSource rng(1005);
    SCOPED_TRACE(rng.trace());
    for (const QuantScheme& s : {QuantScheme{5, true, 12}, QuantScheme{2, false, 6}}) {
        const int64_t cols = 5 * s.group_size + 3, first = s.group_size, last = 4 * s.group_size;
        const std::vector<float> u = random_upper(rng, cols);
        const std::vector<float> w = rng.normal(size_t(cols), 0.2f);
        std::vector<float> row = w, want = w, errors(size_t(last - first) + 1, NAN);
        std::vector<GroupParams> params(size_t(s.num_groups(cols)), GroupParams{NAN, NAN});
        gptq_quantize_block(row.data(), cols, u.data(), first, last, s, params.data(),
                            errors.data());
        GroupParams p;
        for (int64_t c = first; c < last; ++c) {
            if (c % s.group_size == 0) p = expected_params(want.data() + c, s.group_size, s);
            const float q = float(nearest_on_grid(want[size_t(c)], p, s));
            const float e = (want[size_t(c)] - q) / u[size_t(c * cols + c)];
            want[size_t(c)] = q;
            for (int64_t j = c + 1; j < last; ++j) want[size_t(j)] -= e * u[size_t(c * cols + j)];
            ASSERT_NEAR(errors[size_t(c - first)], e, 2e-3 * std::fabs(e) + 1e-5)
                << describe(s) << ", block [" << first << ", " << last << "), column " << c
                << ": e = (w_i − q_i) / U_ii, w_i the weight after the earlier columns' updates";
        }
        EXPECT_TRUE(std::isnan(errors.back())) << "errors written past last − first";
        for (int64_t g = 0; g < s.num_groups(cols); ++g) {
            const bool inside = g * s.group_size >= first && g * s.group_size < last;
            EXPECT_EQ(std::isnan(params[size_t(g)].scale), !inside)
                << "group " << g << ": only the groups of [first, last) are fitted, each at "
                << "its first column";
        }
        for (int64_t i = 0; i < cols; ++i) {
            ASSERT_NEAR(row[size_t(i)], want[size_t(i)], 2e-3 * std::fabs(p.scale) + 1e-5)
                << describe(s) << ", block [" << first << ", " << last << "), column " << i
                << (i < first || i >= last ? ": outside the block, which must leave it as it was"
                                           : ": not what quantizing columns first .. i − 1 and "
                                             "passing their errors on (w_j −= e·U_ij) gives");
        }
    }
}

}  // namespace
}  // namespace servelab
