// weight_matrix.h — one projection's weights, as they are held in memory.
//
// Part of the model loader (issue 11, CPU performance; all labs use it). A
// matrix is (rows, cols), one output feature per row as ggml stores it, so
// applying it is y = x · Wᵀ. It is held either as fp32 values (what the
// tiny test models, the tensor-parallel shards that cut rows apart and the
// MLA projections use) or in its GGUF block format (Q4_0, Q4_1, Q8_0, Q4_K,
// Q6_K), bytes copied from the file. Keeping blocks is what makes decode
// fast: it reads every weight once per token, and Q4_1 is 0.625 bytes per
// weight against fp32's 4 (kernels/cpu/quant_matmul.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/ggml_types.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_repacked.h"

namespace servelab {

// How a quantized matrix multiplies (`servelab --cpu-kernels`):
//   kExact: fp32 activations against the dequantized weights, the numbers the
//     numpy oracle computes (kernels/cpu/quant_matmul.h). A WeightMatrix's
//     default, so tests and library users get the oracle's numbers.
//   kFast: activations quantized to int8 per 32-value block first, as
//     llama.cpp does, so the dot products are integer SIMD
//     (kernels/cpu/quant_matmul_fast.h, and kernels/cpu/quant_matmul_repacked.h
//     where the weights are repacked). Q4_0, Q4_1 and Q8_0 only; other
//     formats stay exact. The default of every servelab command;
//     docs/perf.md reports what it costs in accuracy.
enum class MatmulMode { kExact, kFast };

class WeightMatrix {
  public:
    WeightMatrix() = default;
    static WeightMatrix from_floats(std::vector<float> values, int64_t rows, int64_t cols);
    // `bytes` holds rows × row_size_bytes(type, cols) bytes of blocks.
    static WeightMatrix from_blocks(GgmlType type, std::vector<uint8_t> bytes, int64_t rows,
                                    int64_t cols);

    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    bool empty() const { return rows_ == 0; }
    GgmlType type() const { return type_; }
    // Bytes held: what one pass over every row reads.
    int64_t bytes() const;

    MatmulMode mode() const { return mode_; }
    // kFast also repacks the blocks for the repacked kernel where the CPU
    // and the shape allow (kernels/cpu/quant_matmul_repacked.h); the GGUF
    // bytes stay, for exact mode, embedding lookups and the kernels lab.
    void set_mode(MatmulMode mode);
    // Whether fast mode streams the repacked copy.
    bool is_repacked() const { return !repacked_.empty(); }
    // The repacked copy (is_repacked() only).
    RepackedMatrix repacked() const { return {type_, repacked_.data(), rows_, cols_}; }

    // y (num_tokens, rows) = x (num_tokens, cols) · Wᵀ, by mode().
    void multiply(const float* x, float* y, int64_t num_tokens) const;
    // Whether multiply quantizes x to int8 blocks first (fast mode, a format
    // with an integer kernel): then a caller that already has the blocks
    // may pass them to multiply_quantized instead (chapter 11.7, kernel
    // fusion: kernels/cpu/fused_rmsnorm_quantize.h).
    bool takes_quantized_input() const;
    // y (x.num_tokens, rows) = x · Wᵀ, the same numbers multiply gives for
    // the floats x was quantized from. Throws unless takes_quantized_input().
    void multiply_quantized(const QuantizedActivations& x, float* y) const;
    // Rows [first, first + count) as floats into out (count × cols): an
    // embedding lookup, or a copy for a device.
    void rows_as_floats(int64_t first, int64_t count, float* out) const;
    // The fp32 values; throws unless the matrix is held as fp32.
    const float* floats() const;
    // The GGUF blocks as the file stores them, rows × row_size_bytes(type(),
    // cols()) bytes; throws when the matrix is held as fp32. For a device
    // that keeps the blocks (reference/device/cuda_weights.h).
    const std::vector<uint8_t>& blocks() const;
    // Every value as fp32 (a copy; for devices and tests).
    std::vector<float> to_floats() const;

  private:
    GgmlType type_ = GgmlType::kF32;
    MatmulMode mode_ = MatmulMode::kExact;
    int64_t rows_ = 0;
    int64_t cols_ = 0;
    std::vector<float> values_;      // when type_ == kF32
    std::vector<uint8_t> blocks_;    // otherwise
    std::vector<uint8_t> repacked_;  // kFast, where it applies: blocks_ 16 rows side by side
};

// y_i (num_tokens, rows_i) = x · W_iᵀ for matrices that read the same x:
// Q, K and V of a layer, or its gate and up. When every matrix streams a
// repacked copy (fast mode), x is quantized once and one parallel region
// covers all their rows, each thread taking one contiguous run of the
// matrices' groups laid end to end: one fork/join and one quantization
// instead of one per matrix. Otherwise each matrix multiplies on its own,
// which gives the same numbers.
void multiply_same_input(std::span<const WeightMatrix* const> matrices, const float* x,
                         std::span<float* const> ys, int64_t num_tokens);
// The same for activations already quantized (every matrix must
// takes_quantized_input()): one parallel region where all are repacked.
void multiply_same_input_quantized(std::span<const WeightMatrix* const> matrices,
                                   const QuantizedActivations& x, std::span<float* const> ys);

}  // namespace servelab
