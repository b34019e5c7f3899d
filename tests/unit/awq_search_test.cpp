// awq_search_test.cpp — AWQ's per-input-channel scales (Lab 10's second exercise).
//
// AwqSearch.* grade reference/quant/awq_search.cpp: the scales for one
// exponent α, the weights a layer really computes with once its columns
// are scaled, quantized and scaled back, and the search over α. The layers
// are random with a few planted outlier input channels (activations 25
// times larger than the rest, as LLMs have): there AWQ must beat plain RTN
// by a stated margin, on the calibration tokens and on fresh ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "reference/quant/awq_search.h"
#include "reference/quant/group_quantizer.h"
#include "reference/quant/output_error.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::GuardedArray;
using test::RandomSource;

// A layer and its calibration statistics: activations x (tokens, cols) with
// `num_outliers` channels 25× larger, their mean |x_j| and H = (1/n) Σ xᵀx.
struct Layer {
    int64_t rows = 0, cols = 0;
    std::vector<float> weights;  // (rows, cols)
    std::vector<int64_t> outlier_channels;
    std::vector<float> mean_abs;
    std::vector<float> hessian;
};

std::vector<float> activations(RandomSource& random, const Layer& layer, int64_t tokens) {
    std::vector<float> x = random.normal(size_t(tokens * layer.cols), 1.0f);
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t j : layer.outlier_channels) x[size_t(t * layer.cols + j)] *= 25.0f;
    }
    return x;
}

void set_statistics(Layer& layer, const std::vector<float>& x, int64_t tokens) {
    const int64_t n = layer.cols;
    layer.mean_abs.assign(size_t(n), 0.0f);
    std::vector<double> h(size_t(n * n), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
        const float* row = x.data() + t * n;
        for (int64_t i = 0; i < n; ++i) {
            layer.mean_abs[size_t(i)] += std::fabs(row[i]) / float(tokens);
            for (int64_t j = 0; j < n; ++j) h[size_t(i * n + j)] += double(row[i]) * row[j];
        }
    }
    layer.hessian.resize(h.size());
    for (size_t k = 0; k < h.size(); ++k) layer.hessian[k] = float(h[k] / double(tokens));
}

Layer random_layer(RandomSource& random, int64_t rows, int64_t cols, int64_t tokens) {
    Layer layer;
    layer.rows = rows;
    layer.cols = cols;
    layer.weights = random.normal(size_t(rows * cols), 0.05f);
    std::vector<int64_t> channels(static_cast<size_t>(cols));
    std::iota(channels.begin(), channels.end(), 0);
    std::shuffle(channels.begin(), channels.end(), random.engine());
    layer.outlier_channels.assign(channels.begin(), channels.begin() + 4);
    set_statistics(layer, activations(random, layer, tokens), tokens);
    return layer;
}

// Σ_t ‖x_t·(W − Ŵ)ᵀ‖² / n computed on activations directly (not through H).
double output_error_on(const std::vector<float>& x, int64_t tokens, const Layer& layer,
                       const std::vector<float>& effective) {
    double total = 0.0;
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t r = 0; r < layer.rows; ++r) {
            double y = 0.0;
            for (int64_t j = 0; j < layer.cols; ++j) {
                const size_t k = size_t(r * layer.cols + j);
                y += double(x[size_t(t * layer.cols + j)]) * (layer.weights[k] - effective[k]);
            }
            total += y * y;
        }
    }
    return total / double(tokens);
}

std::vector<float> rtn(const Layer& layer, const QuantScheme& scheme) {
    std::vector<float> out(layer.weights.size());
    rtn_quantize_matrix(layer.weights.data(), out.data(), nullptr, layer.rows, layer.cols, scheme);
    return out;
}

double error_of(const Layer& layer, const std::vector<float>& effective) {
    std::vector<float> delta(effective.size());
    for (size_t k = 0; k < delta.size(); ++k) delta[k] = layer.weights[k] - effective[k];
    return output_error(delta.data(), layer.rows, layer.cols, layer.hessian.data());
}

TEST(AwqSearch, ScalesFollowTheMeanMagnitudeCentredOnOne) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t cols = 96;
    std::vector<float> mean_abs_values = random.uniform(size_t(cols), 0.01f, 3.0f);
    mean_abs_values[7] = 0.0f;  // a channel that never fired
    // Both arrays end at an inaccessible page: a loop past cols stops the test.
    const GuardedArray<float> mean_abs(mean_abs_values);
    for (double alpha : {0.0, 0.25, 0.5, 0.95}) {
        GuardedArray<float> scales(static_cast<size_t>(cols));
        awq_scales_for_alpha(mean_abs.data(), cols, alpha, scales.data());
        std::vector<double> raw(static_cast<size_t>(cols));
        for (int64_t j = 0; j < cols; ++j) {
            raw[size_t(j)] = std::pow(std::max(double(mean_abs_values[size_t(j)]), 1e-4), alpha);
        }
        const double centre = std::sqrt(*std::max_element(raw.begin(), raw.end()) *
                                        *std::min_element(raw.begin(), raw.end()));
        for (int64_t j = 0; j < cols; ++j) {
            const double want = raw[size_t(j)] / centre;
            ASSERT_TRUE(std::isfinite(scales[size_t(j)]))
                << "α = " << alpha << ", channel " << j << " (mean |x| "
                << mean_abs_values[size_t(j)] << "): scale " << scales[size_t(j)]
                << ". A channel that never fired has mean |x| = 0: floor it at 1e-4 before the "
                   "power, or 0^α and its division make it 0 or infinite";
            ASSERT_NEAR(scales[size_t(j)], want, 1e-5 * want)
                << "α = " << alpha << ", channel " << j
                << ": s_j = max(mean |x_j|, 1e-4)^α / sqrt(max s · min s)";
        }
        const auto [lo, hi] = std::minmax_element(scales.data(), scales.data() + cols);
        EXPECT_NEAR(double(*lo) * double(*hi), 1.0, 1e-5)
            << "the scales are centred on 1 on a log axis: max · min = 1";
    }
}

TEST(AwqSearch, EffectiveWeightsAreTheScaledColumnsQuantizedThenScaledBack) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const Layer layer = random_layer(random, 24, 64, 64);
    for (const QuantScheme& scheme :
         {QuantScheme{.bits = 4, .symmetric = true, .group_size = 32},
          QuantScheme{.bits = 3, .symmetric = false, .group_size = 64}}) {
        const std::vector<float> scales = random.uniform(size_t(layer.cols), 0.3f, 3.0f);
        // Q(W·diag(s)) · diag(s)⁻¹, with the reference's RTN.
        std::vector<float> scaled = layer.weights;
        for (int64_t r = 0; r < layer.rows; ++r) {
            for (int64_t j = 0; j < layer.cols; ++j)
                scaled[size_t(r * layer.cols + j)] *= scales[size_t(j)];
        }
        std::vector<float> want(scaled.size());
        rtn_quantize_matrix(scaled.data(), want.data(), nullptr, layer.rows, layer.cols, scheme);
        std::vector<float> inverted = layer.weights;  // the mistake: Q(W / s) · s
        for (int64_t r = 0; r < layer.rows; ++r) {
            for (int64_t j = 0; j < layer.cols; ++j) {
                want[size_t(r * layer.cols + j)] /= scales[size_t(j)];
                inverted[size_t(r * layer.cols + j)] /= scales[size_t(j)];
            }
        }
        rtn_quantize_matrix(inverted.data(), inverted.data(), nullptr, layer.rows, layer.cols,
                            scheme);
        for (int64_t r = 0; r < layer.rows; ++r) {
            for (int64_t j = 0; j < layer.cols; ++j)
                inverted[size_t(r * layer.cols + j)] *= scales[size_t(j)];
        }
        // Inputs end at an inaccessible page: reading past a row or past the scales stops the test.
        const GuardedArray<float> guarded_weights(layer.weights);
        const GuardedArray<float> guarded_scales(scales);
        const std::vector<float> got = awq_effective_weights(
            guarded_weights.data(), layer.rows, layer.cols, guarded_scales.data(), scheme);
        ASSERT_TRUE(test::equal_or_explain(
            "awq_effective_weights = Q(W·diag(s))·diag(s)⁻¹", got, want, 1e-6,
            {{"Q(W·diag(s)⁻¹)·diag(s): the columns are divided before quantizing and multiplied "
              "after. Multiply first: a column scaled up sets its group's range, so its own "
              "rounding error shrinks relative to it; the input arrives divided by s",
              inverted},
             {"the scaled weights W·diag(s) are returned, never quantized", scaled},
             {"W itself: the weights were never quantized", layer.weights}}));
    }
}

TEST(AwqSearch, SearchTriesAlphaZeroAndKeepsTheSmallestError) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const Layer layer = random_layer(random, 32, 128, 128);
    const QuantScheme scheme{.bits = 4, .symmetric = true, .group_size = 32};
    const int num_grid = 10;
    const GuardedArray<float> guarded_weights(layer.weights);  // a read past W stops the test
    const AwqScales found =
        awq_search_scales(guarded_weights.data(), layer.rows, layer.cols, layer.mean_abs.data(),
                          layer.hessian.data(), scheme, num_grid);
    ASSERT_EQ(found.error_by_grid.size(), size_t(num_grid))
        << "one error per exponent tried: α = 0, 1/grid, …, (grid − 1)/grid";
    const double rtn_error = error_of(layer, rtn(layer, scheme));
    EXPECT_NEAR(found.error_by_grid[0], rtn_error, 1e-6 * rtn_error)
        << "the first exponent is α = 0, where every scale is 1: plain RTN. The search must try "
           "it, so that AWQ is never worse than RTN on its calibration data";
    EXPECT_NEAR(found.rtn_output_error, rtn_error, 1e-6 * rtn_error)
        << "rtn_output_error is the error at α = 0";
    for (int i = 0; i < num_grid; ++i) {
        std::vector<float> scales(size_t(layer.cols));
        awq_scales_for_alpha(layer.mean_abs.data(), layer.cols, double(i) / num_grid,
                             scales.data());
        const double want =
            error_of(layer, awq_effective_weights(layer.weights.data(), layer.rows, layer.cols,
                                                  scales.data(), scheme));
        ASSERT_NEAR(found.error_by_grid[size_t(i)], want, 1e-6 * want)
            << "error_by_grid[" << i << "] is the output error at α = " << i << "/" << num_grid;
    }
    const auto best = std::min_element(found.error_by_grid.begin(), found.error_by_grid.end());
    const double best_alpha = double(best - found.error_by_grid.begin()) / num_grid;
    if (found.output_error ==
            *std::max_element(found.error_by_grid.begin(), found.error_by_grid.end()) &&
        found.output_error != *best) {
        FAIL() << "the search kept α = " << found.alpha << ", the exponent with the LARGEST output "
               << "error (" << found.output_error << "); keep the smallest (" << *best
               << " at α = " << best_alpha << ")";
    }
    EXPECT_DOUBLE_EQ(found.output_error, *best) << "the search keeps the smallest output error";
    EXPECT_DOUBLE_EQ(found.alpha, best_alpha) << "and the exponent that gave it";
    std::vector<float> best_scales(size_t(layer.cols));
    awq_scales_for_alpha(layer.mean_abs.data(), layer.cols, best_alpha, best_scales.data());
    ASSERT_TRUE(test::equal_or_explain("the scales kept", found.scales, best_scales, 1e-6))
        << "the scales returned are those of the exponent kept";
}

// Channels of equal mean magnitude give scales of exactly 1 for every α:
// every exponent is RTN, with the same error. The search keeps the first
// smallest error, α = 0, rather than an exponent that changes nothing.
TEST(AwqSearch, WithoutSalientChannelsEveryAlphaIsRtnAndAlphaZeroIsKept) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    Layer layer = random_layer(random, 16, 64, 64);
    std::fill(layer.mean_abs.begin(), layer.mean_abs.end(), 0.8f);
    const AwqScales found = awq_search_scales(
        layer.weights.data(), layer.rows, layer.cols, layer.mean_abs.data(), layer.hessian.data(),
        QuantScheme{.bits = 4, .symmetric = true, .group_size = 32}, 8);
    for (double e : found.error_by_grid) {
        ASSERT_EQ(e, found.error_by_grid[0]) << "with equal channels every α gives scales of 1";
    }
    EXPECT_EQ(found.alpha, 0.0)
        << "every exponent gave the same error; keep the first, α = 0 (replace the best only "
           "when an error is strictly smaller)";
}

// The point of AWQ: on a layer whose inputs have outlier channels, protecting
// those channels' weights lowers the output error well below RTN's, and the
// gain holds on tokens the search never saw.
TEST(AwqSearch, BeatsRtnOnALayerWithOutlierChannels) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const double kMargin = 0.7;  // AWQ's output error at most 70% of RTN's
    for (const QuantScheme& scheme :
         {QuantScheme{.bits = 4, .symmetric = true, .group_size = 32},
          QuantScheme{.bits = 3, .symmetric = false, .group_size = 64}}) {
        Layer layer = random_layer(random, 64, 256, 256);
        const AwqScales found =
            awq_search_scales(layer.weights.data(), layer.rows, layer.cols, layer.mean_abs.data(),
                              layer.hessian.data(), scheme, 20);
        const std::vector<float> awq = awq_effective_weights(
            layer.weights.data(), layer.rows, layer.cols, found.scales.data(), scheme);
        const std::vector<float> plain = rtn(layer, scheme);
        const int64_t fresh_tokens = 256;
        const std::vector<float> fresh = activations(random, layer, fresh_tokens);
        const double awq_fresh = output_error_on(fresh, fresh_tokens, layer, awq);
        const double rtn_fresh = output_error_on(fresh, fresh_tokens, layer, plain);
        EXPECT_LT(found.output_error, kMargin * found.rtn_output_error)
            << scheme.bits << "-bit, groups of " << scheme.group_size << ": AWQ's output error "
            << found.output_error << " (α = " << found.alpha << ") against RTN's "
            << found.rtn_output_error << " on the calibration statistics";
        EXPECT_LT(awq_fresh, kMargin * rtn_fresh)
            << scheme.bits << "-bit: on fresh tokens AWQ's error is " << awq_fresh
            << " against RTN's " << rtn_fresh << ": the protection must carry over";
        EXPECT_GT(found.alpha, 0.0) << "with outlier channels the best exponent is above 0";
    }
}

}  // namespace
}  // namespace servelab
