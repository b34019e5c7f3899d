// awq_search.h — AWQ's per-input-channel scales for one linear layer.
//
// Part of Lab 10, weight quantization (chapter 11.7, AWQ: Lin et al.,
// "Activation-aware Weight Quantization", 2023). A few input channels carry
// much larger activations than the rest; the weights that multiply them
// matter more to the output, and RTN rounds them as coarsely as any other.
// AWQ protects them without mixed precision: multiply column j of W by
// s_j > 1 before quantizing and divide the input x_j by s_j, which leaves
// x·Wᵀ unchanged in exact arithmetic, but makes column j's relative
// rounding error smaller, since its values now set the group's range. The
// division by s is free at inference: it is folded into the op that
// produces x (the RMSNorm's weights, or the rows of the previous matmul;
// reference/quant/awq_folding.h), so the written file is a plain GGUF.
//
// The scales are s_j = mean|x_j|^α, normalised so that max·min = 1, with α
// searched on a grid in [0, 1): α = 0 is plain RTN, larger α protects the
// salient channels more and the others less. The α kept is the one whose
// quantized weights change the layer's outputs least over the calibration
// inputs (output_error.h).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/quant/group_quantizer.h"

namespace servelab {

struct AwqScales {
    std::vector<float> scales;          // (cols) the s_j to multiply W's columns by
    double alpha = 0.0;                 // the exponent chosen
    double output_error = 0.0;          // at that exponent
    double rtn_output_error = 0.0;      // at α = 0: plain RTN, for comparison
    std::vector<double> error_by_grid;  // (num_grid) the error at α = i / num_grid
};

// s_j = max(mean_abs_input[j], 1e-4)^alpha, divided by sqrt(max s · min s).
void awq_scales_for_alpha(const float* mean_abs_input, int64_t cols, double alpha, float* scales);

// W (rows, cols) row-major: every linear that reads the same input, rows
// stacked (q, k and v; gate and up). mean_abs_input (cols): mean |x_j| over
// the calibration tokens; hessian (cols, cols): their (1/n) Σ xᵀx.
// Tries α = 0, 1/num_grid, …, (num_grid − 1)/num_grid.
AwqScales awq_search_scales(const float* weights, int64_t rows, int64_t cols,
                            const float* mean_abs_input, const float* hessian,
                            const QuantScheme& scheme, int num_grid = 20);

// The weights AWQ effectively uses: Q(W·diag(s))·diag(s)⁻¹, (rows, cols).
std::vector<float> awq_effective_weights(const float* weights, int64_t rows, int64_t cols,
                                         const float* scales, const QuantScheme& scheme);

}  // namespace servelab
