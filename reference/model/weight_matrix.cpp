// weight_matrix.cpp — see weight_matrix.h.
#include "reference/model/weight_matrix.h"

#include <fmt/format.h>

#include <omp.h>

#include <algorithm>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_matmul_fast.h"
#include "kernels/cpu/quant_matmul_repacked.h"

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

void WeightMatrix::set_mode(MatmulMode mode) {
    mode_ = mode;
    const bool repack = mode == MatmulMode::kFast && type_ != GgmlType::kF32 &&
                        can_repack(type_, rows_, cols_) && cpu_runs_repacked();
    if (!repack) {
        repacked_ = {};
    } else if (repacked_.empty()) {
        repacked_ =
            repack_rows({type_, blocks_.data(), rows_, cols_, row_size_bytes(type_, cols_)});
    }
}

void WeightMatrix::multiply(const float* x, float* y, int64_t num_tokens) const {
    if (type_ == GgmlType::kF32) {
        matmul(x, values_.data(), y, num_tokens, cols_, rows_);
        return;
    }
    if (takes_quantized_input()) {
        // One buffer per thread (each tensor-parallel rank is a thread),
        // sized by the first, largest step and reused: steady decoding
        // allocates nothing here.
        thread_local QuantizedActivations activations;
        quantize_activations(x, num_tokens, cols_, activations);
        multiply_quantized(activations, y);
        return;
    }
    quant_matmul(x, {type_, blocks_.data(), rows_, cols_, row_size_bytes(type_, cols_)}, y,
                 num_tokens);
}

bool WeightMatrix::takes_quantized_input() const {
    return mode_ == MatmulMode::kFast && type_ != GgmlType::kF32 && has_fast_kernel(type_);
}

void WeightMatrix::multiply_quantized(const QuantizedActivations& x, float* y) const {
    if (!takes_quantized_input() || x.cols != cols_) {
        throw Error(
            "weight matrix: int8 activations need fast mode, an integer kernel and x.cols == cols");
    }
    if (is_repacked()) {
        quant_matmul_repacked(x, repacked(), y);
    } else {
        quant_matmul_fast(x, {type_, blocks_.data(), rows_, cols_, row_size_bytes(type_, cols_)},
                          y);
    }
}

void multiply_same_input(std::span<const WeightMatrix* const> matrices, const float* x,
                         std::span<float* const> ys, int64_t num_tokens) {
    if (matrices.size() != ys.size()) {
        throw Error("multiply_same_input: one output per matrix");
    }
    bool fused = !matrices.empty();
    for (const WeightMatrix* m : matrices) {
        fused = fused && m->mode() == MatmulMode::kFast && m->is_repacked() &&
                m->cols() == matrices[0]->cols();
    }
    if (!fused) {
        for (size_t i = 0; i < matrices.size(); ++i) matrices[i]->multiply(x, ys[i], num_tokens);
        return;
    }
    thread_local QuantizedActivations activations;
    quantize_activations(x, num_tokens, matrices[0]->cols(), activations);
    multiply_same_input_quantized(matrices, activations, ys);
}

void multiply_same_input_quantized(std::span<const WeightMatrix* const> matrices,
                                   const QuantizedActivations& activations,
                                   std::span<float* const> ys) {
    if (matrices.size() != ys.size()) {
        throw Error("multiply_same_input: one output per matrix");
    }
    bool one_region = !matrices.empty();
    for (const WeightMatrix* m : matrices) {
        if (!m->takes_quantized_input() || m->cols() != activations.cols) {
            throw Error("multiply_same_input_quantized: every matrix must take these int8 blocks");
        }
        one_region = one_region && m->is_repacked();
    }
    if (!one_region) {
        for (size_t i = 0; i < matrices.size(); ++i)
            matrices[i]->multiply_quantized(activations, ys[i]);
        return;
    }
    int64_t total_groups = 0;
    for (const WeightMatrix* m : matrices) total_groups += m->rows() / kRepackRows;
#pragma omp parallel
    {
        const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t first = total_groups * me / threads;
        const int64_t last = total_groups * (me + 1) / threads;
        int64_t matrix_first = 0;  // where matrix i's groups start in the concatenation
        for (size_t i = 0; i < matrices.size(); ++i) {
            const int64_t groups = matrices[i]->rows() / kRepackRows;
            const int64_t lo = std::max(first, matrix_first);
            const int64_t hi = std::min(last, matrix_first + groups);
            if (lo < hi) {
                quant_matmul_repacked_rows(activations, matrices[i]->repacked(), ys[i],
                                           (lo - matrix_first) * kRepackRows,
                                           (hi - matrix_first) * kRepackRows);
            }
            matrix_first += groups;
        }
    }
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

const std::vector<uint8_t>& WeightMatrix::blocks() const {
    if (type_ == GgmlType::kF32) throw Error("weight matrix: held as fp32 values, not blocks");
    return blocks_;
}

}  // namespace servelab
