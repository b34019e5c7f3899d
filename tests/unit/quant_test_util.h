// quant_test_util.h — random Q4_1 (and Q4_0, Q8_0) weight matrices for the GEMV tests (Lab 8,
// the kernels lab: decode is memory-bound).
//
// Shared by gemv_steps_test.cpp, the Lab 8 hidden tests and the GPU's
// quantized-weight tests (cuda_quant_*_test.cpp): random codes in every
// nibble and a d and an m of either sign in every block, so that a kernel
// that reads a nibble, a scale or a sign wrongly gets a different y.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quant_matmul.h"
#include "tests/unit/test_util.h"

namespace servelab::test {

// The bytes and the view the kernels read (view points into bytes).
struct RandomQ4_1 {
    std::vector<uint8_t> bytes;
    QuantMatrix view;
};

// Random codes; d and m of either sign in ±[scale_step, 100 · scale_step],
// stored as fp16 in each 20-byte block (d, m, then 16 bytes of codes).
inline RandomQ4_1 random_q4_1(RandomSource& random, int64_t rows, int64_t cols, float scale_step) {
    RandomQ4_1 w;
    const int64_t row_bytes = row_size_bytes(GgmlType::kQ4_1, cols);
    w.bytes.resize(size_t(rows * row_bytes));
    for (uint8_t& b : w.bytes) b = uint8_t(random.integer(0, 255));
    auto scale = [&] {
        const float magnitude = float(random.integer(1, 100)) * scale_step;
        return random.integer(0, 1) ? magnitude : -magnitude;
    };
    for (size_t b = 0; b < w.bytes.size(); b += 20) {
        const uint16_t d = float_to_fp16(scale()), m = float_to_fp16(scale());
        w.bytes[b] = uint8_t(d & 0xFF), w.bytes[b + 1] = uint8_t(d >> 8);
        w.bytes[b + 2] = uint8_t(m & 0xFF), w.bytes[b + 3] = uint8_t(m >> 8);
    }
    w.view = {GgmlType::kQ4_1, w.bytes.data(), rows, cols, row_bytes};
    return w;
}

// GGUF blocks of Q4_0, Q4_1 or Q8_0 for a (rows, cols) matrix: random
// codes, and the block's fp16 scales (d, and m for Q4_1) of either sign in
// ±[scale_step, 100 · scale_step], at the head of each block as GGUF stores them.
inline std::vector<uint8_t> random_gguf_blocks(RandomSource& random, GgmlType type, int64_t rows,
                                               int64_t cols, float scale_step) {
    const int64_t block_bytes = ggml_type_traits(type).block_bytes;
    const int64_t num_scales = type == GgmlType::kQ4_1 ? 2 : 1;
    std::vector<uint8_t> bytes(size_t(rows * row_size_bytes(type, cols)));
    for (uint8_t& b : bytes) b = uint8_t(random.integer(0, 255));
    for (size_t b = 0; b < bytes.size(); b += size_t(block_bytes)) {
        for (int64_t s = 0; s < num_scales; ++s) {
            const float magnitude = float(random.integer(1, 100)) * scale_step;
            const uint16_t h = float_to_fp16(random.integer(0, 1) ? magnitude : -magnitude);
            bytes[b + size_t(2 * s)] = uint8_t(h & 0xFF);
            bytes[b + size_t(2 * s + 1)] = uint8_t(h >> 8);
        }
    }
    return bytes;
}

}  // namespace servelab::test
