// gptq_block.cpp — see gptq_block.h. Lab 10's third exercise: quantize a block, pass the error on.
#include "reference/quant/gptq_block.h"

namespace servelab {

void gptq_quantize_block(float* row, int64_t cols, const float* u, int64_t first, int64_t last,
                         const QuantScheme& scheme, GroupParams* group_params, float* errors) {
    // BEGIN SOLUTION lab10 (gptq_quantize_block)
    // HINT: for each column i of the block: at a group's first column, fit_group on the
    // HINT: row's current weights from i (group_length of them): they carry earlier columns'
    // HINT: updates.
    // HINT: q = dequantize_code(quantize_weight(row[i])), e = (row[i] − q) / u[i][i];
    // HINT: row[i] = q, errors[i − first] = e, and row[j] −= e · u[i][j] for i < j < last.
    for (int64_t i = first; i < last; ++i) {
        if (i % scheme.group_size == 0) {
            group_params[i / scheme.group_size] =
                fit_group(row + i, scheme.group_length(i, cols), scheme);
        }
        const GroupParams& params = group_params[i / scheme.group_size];
        const float quantized = dequantize_code(quantize_weight(row[i], params, scheme), params);
        const float* u_row = u + i * cols;
        const float error = (row[i] - quantized) / u_row[i];
        row[i] = quantized;
        errors[i - first] = error;
        for (int64_t j = i + 1; j < last; ++j) row[j] -= error * u_row[j];
    }
    // END SOLUTION
}

}  // namespace servelab
