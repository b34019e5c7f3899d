// gptq_block.h — GPTQ's update for one block of columns of one row.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ: Frantar et al.,
// "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers", 2022). RTN rounds every weight on its own. GPTQ quantizes
// the columns (input channels) of W one at a time and, after each, changes
// the columns not yet quantized so that the layer's outputs over the
// calibration inputs move as little as possible (output_error.h): the error
// of column i is spread onto the later columns in proportion to how their
// inputs correlate with input i. With H the inputs' second moment and
// H⁻¹ = UᵀU (U upper triangular, reference/quant/cholesky.h), quantizing
// column i of a row w is
//
//     q_i = Q(w_i);   e = (w_i − q_i) / U_ii;   w_j −= e · U_ij   for every j > i
//
// Every row of W is independent (they share H), so this is one row's work.
// Within a block of B columns the update is applied column by column; the
// columns after the block receive the block's errors all at once afterwards
// (reference/quant/gptq.h, the "lazy batch" of the paper), which is the same
// arithmetic reordered so that each pass over the row's tail does B columns'
// worth of work.
#pragma once

#include <cstdint>

#include "reference/quant/group_quantizer.h"

namespace servelab {

// Quantizes columns [first, last) of one row `row` (cols weights): on
// return they hold the values their codes stand for, and the columns of
// (i, last) have received each column i's update. A group's parameters are
// fitted from the row's current weights when its first column is reached,
// into group_params[column / group_size] (first must be a multiple of the
// group size, and last one too or cols: a group never straddles blocks). errors[i − first] gets
// column i's scaled error e. u: the (cols, cols) row-major upper factor of H⁻¹; only u[i][j] with
// first <= i < last, j >= i are read.
void gptq_quantize_block(float* row, int64_t cols, const float* u, int64_t first, int64_t last,
                         const QuantScheme& scheme, GroupParams* group_params, float* errors);

}  // namespace servelab
