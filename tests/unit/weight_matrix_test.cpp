// weight_matrix_test.cpp — a projection held as fp32 or as GGUF blocks.
//
// Issue 11. Either way, multiply() must equal matmul() over the rows as
// floats, and rows_as_floats() must equal dequantize_row; bad shapes are
// refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"
#include "reference/model/weight_matrix.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

// Q8_0 blocks with random codes and a random finite scale per block.
std::vector<uint8_t> random_q8_0(test::RandomSource& random, int64_t rows, int64_t cols) {
    std::vector<uint8_t> bytes(size_t(rows * row_size_bytes(GgmlType::kQ8_0, cols)));
    for (uint8_t& b : bytes) b = uint8_t(random.integer(0, 255));
    for (size_t b = 0; b < bytes.size(); b += 34) {
        const uint16_t d = float_to_fp16(random.uniform(1, 0.001f, 0.02f)[0]);
        bytes[b] = uint8_t(d & 0xFF);
        bytes[b + 1] = uint8_t(d >> 8);
    }
    return bytes;
}

TEST(WeightMatrix, BlocksAndFloatsMultiplyAsTheirDequantizedRows) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t rows = random.integer(1, 40), cols = 32 * random.integer(1, 10);
    const WeightMatrix quant =
        WeightMatrix::from_blocks(GgmlType::kQ8_0, random_q8_0(random, rows, cols), rows, cols);
    std::vector<float> dense(size_t(rows * cols), std::numeric_limits<float>::quiet_NaN());
    quant.rows_as_floats(0, rows, dense.data());
    const WeightMatrix fp32 = WeightMatrix::from_floats(dense, rows, cols);
    EXPECT_EQ(quant.bytes(), rows * cols / 32 * 34);
    EXPECT_EQ(fp32.bytes(), rows * cols * 4);

    const int64_t tokens = random.integer(1, 7);
    const std::vector<float> x = random.normal(size_t(tokens * cols));
    std::vector<float> want(size_t(tokens * rows)), from_quant(want.size(), NAN),
        from_fp32(want.size(), NAN);
    matmul_plain(x.data(), dense.data(), want.data(), tokens, cols, rows);
    quant.multiply(x.data(), from_quant.data(), tokens);
    fp32.multiply(x.data(), from_fp32.data(), tokens);
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(from_quant[i], want[i], 1e-4 * (1 + std::abs(want[i])));
        EXPECT_NEAR(from_fp32[i], want[i], 1e-4 * (1 + std::abs(want[i])));
    }
    // One row, as an embedding lookup takes it.
    std::vector<float> row(static_cast<size_t>(cols));
    const int64_t r = random.integer(0, rows - 1);
    quant.rows_as_floats(r, 1, row.data());
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(row[size_t(c)], dense[size_t(r * cols + c)]);
}

TEST(WeightMatrix, RefusesBadShapesInOneLine) {
    EXPECT_NE(test::error_of([] {
                  WeightMatrix::from_floats(std::vector<float>(5), 2, 3);
              }).find("do not make 2 × 3"),
              std::string::npos);
    EXPECT_NE(test::error_of([] {
                  WeightMatrix::from_blocks(GgmlType::kQ4_1, std::vector<uint8_t>(19), 1, 32);
              }).find("not 1 rows of 32"),
              std::string::npos);
    const WeightMatrix m =
        WeightMatrix::from_blocks(GgmlType::kQ4_1, std::vector<uint8_t>(20), 1, 32);
    EXPECT_NE(test::error_of([&] { m.floats(); }).find("not fp32"), std::string::npos);
    std::vector<float> out(64);
    EXPECT_NE(test::error_of([&] { m.rows_as_floats(0, 2, out.data()); }).find("outside"),
              std::string::npos);
}

}  // namespace
}  // namespace servelab
