// gptq.cpp — see gptq.h.
#include "reference/quant/gptq.h"

#include <fmt/format.h>
#include <cstddef>

#include <algorithm>

#include "kernels/common/error.h"
#include "kernels/cpu/parallel_for.h"
#include "reference/quant/cholesky.h"
#include "reference/quant/gptq_block.h"

namespace servelab {

GptqResult gptq_quantize_matrix(const float* weights, int64_t rows, int64_t cols,
                                const float* hessian, const QuantScheme& scheme,
                                const GptqOptions& options) {
    const int64_t group = scheme.group_size;
    if (group <= 0) throw Error(fmt::format("gptq: a group size of {}", group));
    // 1. The damped Hessian; dead input channels get weight 0 and a unit diagonal.
    std::vector<double> h(hessian, hessian + cols * cols);
    std::vector<bool> dead(size_t(cols), false);
    double diagonal_sum = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
        if (h[size_t(i * cols + i)] <= 0.0) {
            dead[size_t(i)] = true;
            h[size_t(i * cols + i)] = 1.0;
        }
        diagonal_sum += h[size_t(i * cols + i)];
    }
    const double damping = options.damping * diagonal_sum / double(cols);
    for (int64_t i = 0; i < cols; ++i) h[size_t(i * cols + i)] += damping;

    // 2. H⁻¹ = UᵀU.
    const std::vector<float> u = inverse_upper_factor(h, cols);

    // 3. Row by row, block by block.
    const int64_t block = std::max<int64_t>(1, options.block_size / group) * group;
    GptqResult result;
    result.values.assign(weights, weights + rows * cols);
    result.params.resize(size_t(rows * scheme.num_groups(cols)));
    // Rows are independent (they share H). parallel_for, not a bare omp loop:
    // the exercise may throw (NotImplemented).
    parallel_for(rows, [&](int64_t r) {
        std::vector<float> errors(static_cast<size_t>(block));
        float* row = result.values.data() + r * cols;
        for (int64_t i = 0; i < cols; ++i) {
            if (dead[size_t(i)]) row[i] = 0.0f;
        }
        GroupParams* row_params = result.params.data() + r * scheme.num_groups(cols);
        for (int64_t first = 0; first < cols; first += block) {
            const int64_t last = std::min(first + block, cols);
            gptq_quantize_block(row, cols, u.data(), first, last, scheme, row_params,
                                errors.data());
            // The lazy batch: the block's errors reach the later columns all at once.
            for (int64_t k = 0; k < last - first; ++k) {
                const float error = errors[size_t(k)];
                const float* u_row = u.data() + (first + k) * cols;
                for (int64_t j = last; j < cols; ++j) row[j] -= error * u_row[j];
            }
        }
    });
    return result;
}

}  // namespace servelab
