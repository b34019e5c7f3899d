// output_error.h — how much a change of weights changes a layer's outputs, over calibration data.
//
// Part of Lab 10, weight quantization (chapter 11.7). A linear layer y = x·Wᵀ
// with weights W replaced by W + ΔW changes every output by x·ΔWᵀ. Summed
// over the calibration inputs x_1..x_n and averaged:
//
//     (1/n) Σ_t ‖x_t·ΔWᵀ‖² = Σ_rows Δw_r · H · Δw_rᵀ,    H = (1/n) Σ_t x_tᵀ x_t
//
// so the n inputs never need to be kept: their second moment H (cols × cols,
// reference/quant/calibration.h) is enough. AWQ minimises this over its
// scales; GPTQ minimises it column by column, H being the Hessian of exactly
// this objective.
#pragma once

#include <cstdint>

namespace servelab {

// Σ_r Δw_r H Δw_rᵀ for delta (rows, cols) row-major and H (cols, cols)
// symmetric. Accumulated in double.
double output_error(const float* delta, int64_t rows, int64_t cols, const float* hessian);

}  // namespace servelab
