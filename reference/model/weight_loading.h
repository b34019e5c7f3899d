// weight_loading.h — GGUF tensors into WeightMatrix, whole or a slice.
//
// Part of the model loader (issue 11; Lab 7's shard loader uses the slices).
// A quantized tensor keeps its blocks: bytes are copied from the mapped file
// and the matmul kernels decode them as they multiply. Only F32 tensors are
// held as floats (what the tiny test models use).
#pragma once

#include <cstdint>
#include <string>

#include "reference/model/gguf_reader.h"
#include "reference/model/weight_matrix.h"

namespace servelab {

// Rows [row_begin, row_end) of the (num_rows, row_length) tensor `name`:
// the whole matrix, a column-parallel shard (output features) or a slice of
// the vocabulary. Rows are whole blocks, so a row slice of a quantized
// tensor is still quantized. Throws for a missing tensor or other shape.
WeightMatrix load_matrix_rows(const GgufFile& file, const std::string& name, int64_t row_length,
                              int64_t num_rows, int64_t row_begin, int64_t row_end);

// Columns [col_begin, col_end) of every row: a row-parallel shard (input
// features). Blocks span columns, so the slice stays quantized only when both
// ends fall on block boundaries; otherwise it is dequantized to fp32.
WeightMatrix load_matrix_columns(const GgufFile& file, const std::string& name, int64_t row_length,
                                 int64_t num_rows, int64_t col_begin, int64_t col_end);

}  // namespace servelab
