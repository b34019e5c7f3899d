// awq_search.cpp — see awq_search.h. Lab 10's second exercise: the scale search.
#include "reference/quant/awq_search.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "reference/quant/output_error.h"

namespace servelab {

void awq_scales_for_alpha(const float* mean_abs_input, int64_t cols, double alpha, float* scales) {
    // BEGIN SOLUTION lab10 (awq_scales_for_alpha)
    // HINT: s_j = pow(max(mean_abs_input[j], 1e-4), alpha); then divide every s_j by
    // HINT: sqrt(max_j s_j · min_j s_j), which centres the scales around 1 on a log axis.
    double largest = 0.0;
    double smallest = std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < cols; ++j) {
        const double s = std::pow(std::max(double(mean_abs_input[j]), 1e-4), alpha);
        scales[j] = float(s);
        largest = std::max(largest, s);
        smallest = std::min(smallest, s);
    }
    const double centre = std::sqrt(largest * smallest);
    for (int64_t j = 0; j < cols; ++j) scales[j] = float(double(scales[j]) / centre);
    // END SOLUTION
}

std::vector<float> awq_effective_weights(const float* weights, int64_t rows, int64_t cols,
                                         const float* scales, const QuantScheme& scheme) {
    // BEGIN SOLUTION lab10 (awq_effective_weights)
    // HINT: scale the columns (w[r][j] · s_j), quantize with rtn_quantize_matrix, and divide
    // HINT: the columns back by s_j: the input will arrive divided by s_j, so this is what
    // HINT: the layer computes with.
    std::vector<float> scaled(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) scaled[r * cols + j] = weights[r * cols + j] * scales[j];
    }
    rtn_quantize_matrix(scaled.data(), scaled.data(), nullptr, rows, cols, scheme);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) scaled[r * cols + j] /= scales[j];
    }
    return scaled;
    // END SOLUTION
}

AwqScales awq_search_scales(const float* weights, int64_t rows, int64_t cols,
                            const float* mean_abs_input, const float* hessian,
                            const QuantScheme& scheme, int num_grid) {
    AwqScales result;
    result.scales.assign(size_t(cols), 1.0f);
    result.output_error = std::numeric_limits<double>::infinity();
    std::vector<float> scales(static_cast<size_t>(cols));
    std::vector<float> delta(size_t(rows * cols));
    // BEGIN SOLUTION lab10 (awq_search_scales)
    // HINT: for each grid point i: alpha = i / num_grid, the scales for it, the effective
    // HINT: weights, then delta = W − effective and its output_error(delta, ..., hessian).
    // HINT: Record every error in error_by_grid (i = 0 is plain RTN: rtn_output_error) and
    // HINT: keep the scales, alpha and error of the smallest (of equal errors, the first).
    for (int i = 0; i < num_grid; ++i) {
        const double alpha = double(i) / double(num_grid);
        awq_scales_for_alpha(mean_abs_input, cols, alpha, scales.data());
        const std::vector<float> effective =
            awq_effective_weights(weights, rows, cols, scales.data(), scheme);
        for (int64_t k = 0; k < rows * cols; ++k) delta[k] = weights[k] - effective[k];
        const double error = output_error(delta.data(), rows, cols, hessian);
        result.error_by_grid.push_back(error);
        if (i == 0) result.rtn_output_error = error;
        if (error < result.output_error) {
            result.output_error = error;
            result.alpha = alpha;
            result.scales = scales;
        }
    }
    // END SOLUTION
    return result;
}

}  // namespace servelab
