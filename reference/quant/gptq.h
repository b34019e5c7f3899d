// gptq.h — GPTQ for one weight matrix: damping, the inverse Hessian's factor, the blocks.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ). The driver
// around the exercise gptq_quantize_block (gptq_block.h):
//   1. H = the calibration inputs' (1/n) Σ xᵀx (reference/quant/calibration.h).
//      An input channel that never fired (H_ii = 0) carries no information:
//      its weights are set to 0 and H_ii to 1. Damping adds λ = damping ·
//      mean(diag H) to the diagonal, so H is safely invertible and the updates
//      stay small where the data says little.
//   2. U, the upper Cholesky factor of H⁻¹ (cholesky.h).
//   3. Per row (rows are independent), block by block of block_size
//      columns: the block's columns one at a time (the exercise), then the
//      block's errors applied to every later column at once.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/quant/group_quantizer.h"

namespace servelab {

struct GptqOptions {
    double damping = 0.01;     // λ as a fraction of the mean diagonal of H (the paper's 1%)
    int64_t block_size = 128;  // columns per lazy batch; rounded up to a multiple of the group
};

struct GptqResult {
    std::vector<float> values;        // (rows, cols) what the codes stand for
    std::vector<GroupParams> params;  // (rows, scheme.num_groups(cols))
};

// W (rows, cols) row-major; hessian (cols, cols).
GptqResult gptq_quantize_matrix(const float* weights, int64_t rows, int64_t cols,
                                const float* hessian, const QuantScheme& scheme,
                                const GptqOptions& options = {});

}  // namespace servelab
