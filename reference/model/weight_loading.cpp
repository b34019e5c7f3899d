// weight_loading.cpp — see weight_loading.h.
#include "reference/model/weight_loading.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/dequantize.h"

namespace servelab {
namespace {

const GgufTensorInfo& require_matrix(const GgufFile& file, const std::string& name,
                                     int64_t row_length, int64_t num_rows) {
    return file.require_tensor(name, std::vector<int64_t>{row_length, num_rows});
}

// Dequantize a (num_rows, row_length) block of rows into floats, keeping
// columns [col_begin, col_end) of each.
std::vector<float> dequantize_slice(const GgufTensorInfo& info, int64_t row_begin, int64_t row_end,
                                    int64_t col_begin, int64_t col_end) {
    const int64_t row_length = info.row_length();
    const int64_t row_bytes = row_size_bytes(info.type, row_length);
    const int64_t width = col_end - col_begin;
    std::vector<float> values(size_t((row_end - row_begin) * width));
#pragma omp parallel
    {
        std::vector<float> row_values(static_cast<size_t>(row_length));
#pragma omp for schedule(static)
        for (int64_t row = row_begin; row < row_end; ++row) {
            dequantize_row(info.type, info.data + row * row_bytes, row_values.data(), row_length);
            std::copy(row_values.begin() + col_begin, row_values.begin() + col_end,
                      values.begin() + (row - row_begin) * width);
        }
    }
    return values;
}

}  // namespace

WeightMatrix load_matrix_rows(const GgufFile& file, const std::string& name, int64_t row_length,
                              int64_t num_rows, int64_t row_begin, int64_t row_end) {
    const GgufTensorInfo& info = require_matrix(file, name, row_length, num_rows);
    const int64_t count = row_end - row_begin;
    if (info.type == GgmlType::kF32) {
        return WeightMatrix::from_floats(dequantize_slice(info, row_begin, row_end, 0, row_length),
                                         count, row_length);
    }
    const int64_t row_bytes = row_size_bytes(info.type, row_length);
    const uint8_t* first = info.data + row_begin * row_bytes;
    return WeightMatrix::from_blocks(
        info.type, std::vector<uint8_t>(first, first + count * row_bytes), count, row_length);
}

WeightMatrix load_matrix_columns(const GgufFile& file, const std::string& name, int64_t row_length,
                                 int64_t num_rows, int64_t col_begin, int64_t col_end) {
    const GgufTensorInfo& info = require_matrix(file, name, row_length, num_rows);
    const int64_t width = col_end - col_begin;
    const int64_t block = ggml_type_traits(info.type).block_elems;
    if (info.type == GgmlType::kF32 || col_begin % block != 0 || col_end % block != 0) {
        return WeightMatrix::from_floats(dequantize_slice(info, 0, num_rows, col_begin, col_end),
                                         num_rows, width);
    }
    // Whole blocks: copy each row's bytes for the slice.
    const int64_t row_bytes = row_size_bytes(info.type, row_length);
    const int64_t first_byte = row_size_bytes(info.type, col_begin);
    const int64_t slice_bytes = row_size_bytes(info.type, width);
    std::vector<uint8_t> bytes(size_t(num_rows * slice_bytes));
    for (int64_t row = 0; row < num_rows; ++row) {
        const uint8_t* source = info.data + row * row_bytes + first_byte;
        std::copy(source, source + slice_bytes, bytes.begin() + row * slice_bytes);
    }
    return WeightMatrix::from_blocks(info.type, std::move(bytes), num_rows, width);
}

}  // namespace servelab
