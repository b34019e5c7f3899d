// weight_matrix.cpp — see weight_matrix.h.
#include "reference/model/weight_matrix.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_matmul_fast.h"
#include "reference/common/error.h"

namespace servelab {

WeightMatrix WeightMatrix::from_floats(std::vector<float> values, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0 || int64_t(values.size()) != rows * cols) {
        throw Error(
            fmt::format("weight matrix: {} values do not make {} × {}", values.size(), rows, cols));
    }
    WeightMatrix m;
    m.rows_ = rows;
    m.cols_ = cols;
    m.values_ = std::move(values);
    return m;
}

WeightMatrix WeightMatrix::from_blocks(GgmlType type, std::vector<uint8_t> bytes, int64_t rows,
                                       int64_t cols) {
    if (type == GgmlType::kF32) {
        throw Error("weight matrix: f32 values go through from_floats");
    }
    if (!row_is_whole_blocks(type, cols) ||
        int64_t(bytes.size()) != rows * row_size_bytes(type, cols)) {
        throw Error(fmt::format("weight matrix: {} bytes are not {} rows of {} {} values",
                                bytes.size(), rows, cols, ggml_type_traits(type).name));
    }
    WeightMatrix m;
    m.type_ = type;
    m.rows_ = rows;
    m.cols_ = cols;
    m.blocks_ = std::move(bytes);
    return m;
}

int64_t WeightMatrix::bytes() const {
    return type_ == GgmlType::kF32 ? int64_t(values_.size() * sizeof(float))
                                   : int64_t(blocks_.size());
}

void WeightMatrix::multiply(const float* x, float* y, int64_t num_tokens) const {
    if (type_ == GgmlType::kF32) {
        matmul(x, values_.data(), y, num_tokens, cols_, rows_);
        return;
    }
    const QuantMatrix view{type_, blocks_.data(), rows_, cols_, row_size_bytes(type_, cols_)};
    if (mode_ == MatmulMode::kFast && has_fast_kernel(type_)) {
        // One buffer per thread (each tensor-parallel rank is a thread),
        // sized by the first, largest step and reused: steady decoding
        // allocates nothing here.
        thread_local QuantizedActivations activations;
        quantize_activations(x, num_tokens, cols_, activations);
        quant_matmul_fast(activations, view, y);
        return;
    }
    quant_matmul(x, view, y, num_tokens);
}

void WeightMatrix::rows_as_floats(int64_t first, int64_t count, float* out) const {
    if (first < 0 || count < 0 || first + count > rows_) {
        throw Error(fmt::format("weight matrix: rows [{}, {}) outside its {} rows", first,
                                first + count, rows_));
    }
    if (type_ == GgmlType::kF32) {
        std::copy_n(values_.data() + first * cols_, count * cols_, out);
        return;
    }
    const int64_t row_bytes = row_size_bytes(type_, cols_);
    for (int64_t r = 0; r < count; ++r) {
        dequantize_row(type_, blocks_.data() + (first + r) * row_bytes, out + r * cols_, cols_);
    }
}

std::vector<float> WeightMatrix::to_floats() const {
    std::vector<float> values(size_t(rows_ * cols_));
    rows_as_floats(0, rows_, values.data());
    return values;
}

const float* WeightMatrix::floats() const {
    if (type_ != GgmlType::kF32) {
        throw Error(fmt::format("weight matrix: held as {} blocks, not fp32 values",
                                ggml_type_traits(type_).name));
    }
    return values_.data();
}

}  // namespace servelab
