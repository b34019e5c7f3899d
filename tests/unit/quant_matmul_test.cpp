// quant_matmul_test.cpp — projections straight from quantized blocks against
// the dequantize-then-multiply route.
//
// Issue 11. Random block bytes (random codes, random finite scales) for every
// format the loader knows; the fused kernel, the plain one and matmul() over
// dequantize_row's floats must agree to float rounding, for token counts that
// fill whole tiles and leave remainders, and row counts that do not divide
// the threads' chunks. Outputs are poisoned first, so an unwritten entry fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_fast.h"
#include "kernels/cpu/quant_matmul_repacked.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

void put_fp16(uint8_t* p, float value) {
    const uint16_t h = float_to_fp16(value);
    p[0] = uint8_t(h & 0xFF);
    p[1] = uint8_t(h >> 8);
}

// A (rows, cols) matrix of `type` with random codes and scales.
std::vector<uint8_t> random_matrix(test::RandomSource& random, GgmlType type, int64_t rows,
                                   int64_t cols) {
    const GgmlTypeTraits traits = ggml_type_traits(type);
    const int64_t row_bytes = row_size_bytes(type, cols);
    std::vector<uint8_t> bytes(size_t(rows * row_bytes));
    for (uint8_t& b : bytes) b = uint8_t(random.integer(0, 255));
    const int64_t blocks = rows * cols / traits.block_elems;
    for (int64_t i = 0; i < blocks; ++i) {
        uint8_t* block = bytes.data() + i * traits.block_bytes;
        const auto scale = [&] { return random.uniform(1, 0.002f, 0.05f)[0]; };
        switch (type) {
            case GgmlType::kQ8_0:
                put_fp16(block, scale());
                break;
            case GgmlType::kQ4_0:
                put_fp16(block, scale());
                break;
            case GgmlType::kQ4_1:
                put_fp16(block, scale());
                put_fp16(block + 2, random.uniform(1, -0.2f, 0.2f)[0]);
                break;
            case GgmlType::kQ4_K:  // d, dmin, then 6-bit scales and codes
                put_fp16(block, scale());
                put_fp16(block + 2, scale());
                break;
            case GgmlType::kQ6_K:  // codes and scales, then d last
                put_fp16(block + traits.block_bytes - 2, scale());
                break;
            default:
                break;
        }
    }
    if (type == GgmlType::kF32) {
        const std::vector<float> values = random.normal(size_t(rows * cols), 0.1f);
        std::memcpy(bytes.data(), values.data(), bytes.size());
    }
    return bytes;
}

class QuantMatmulTest : public ::testing::TestWithParam<GgmlType> {
  protected:
    test::RandomSource random_;
};

TEST_P(QuantMatmulTest, MatchesDequantizeThenMatmul) {
    SCOPED_TRACE(random_.trace());
    const GgmlType type = GetParam();
    const int64_t block = ggml_type_traits(type).block_elems;
    for (const int64_t num_tokens : {1, 2, 3, 4, 5, 9}) {
        const int64_t rows = random_.integer(1, 70);
        const int64_t cols = block * random_.integer(1, block == 256 ? 3 : 24);
        const std::vector<uint8_t> bytes = random_matrix(random_, type, rows, cols);
        const QuantMatrix w{type, bytes.data(), rows, cols, row_size_bytes(type, cols)};
        const std::vector<float> x = random_.normal(size_t(num_tokens * cols));

        std::vector<float> dense(size_t(rows * cols));
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(type, bytes.data() + r * w.row_bytes, dense.data() + r * cols, cols);
        }
        const float poison = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> want(size_t(num_tokens * rows), poison);
        std::vector<float> plain(want.size(), poison), fused(want.size(), poison);
        std::vector<float> portable(want.size(), poison);
        matmul_plain(x.data(), dense.data(), want.data(), num_tokens, cols, rows);
        quant_matmul_plain(x.data(), w, plain.data(), num_tokens);
        quant_matmul(x.data(), w, fused.data(), num_tokens);
        quant_matmul(x.data(), w, portable.data(), num_tokens, QuantKernels::kPortable);
        double scale = 0;
        for (float v : want) scale = std::max(scale, double(std::abs(v)));
        for (size_t i = 0; i < want.size(); ++i) {
            // Only the summation order differs: a few ulps of the largest output.
            const double tolerance = 1e-5 * std::max(scale, 1.0) * std::sqrt(double(cols));
            ASSERT_NEAR(plain[i], want[i], tolerance)
                << "plain, tokens " << num_tokens << " i " << i;
            ASSERT_NEAR(portable[i], want[i], tolerance) << "portable, tokens " << num_tokens;
            ASSERT_NEAR(fused[i], want[i], tolerance) << "fused, tokens " << num_tokens << ", rows "
                                                      << rows << ", cols " << cols << ", i " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantMatmulTest,
                         ::testing::Values(GgmlType::kQ4_1, GgmlType::kQ4_0, GgmlType::kQ8_0,
                                           GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kF32),
                         [](const auto& info) {
                             return std::string(ggml_type_traits(info.param).name);
                         });

// Fast mode must compute exactly the product with the activations it
// quantized (so the integer kernels lose nothing beyond that rounding), and
// that rounding must stay small: each activation moves by at most d_x / 2.
class QuantMatmulFastTest : public QuantMatmulTest {};

TEST_P(QuantMatmulFastTest, IsExactForItsQuantizedActivations) {
    SCOPED_TRACE(random_.trace());
    const GgmlType type = GetParam();
    ASSERT_TRUE(has_fast_kernel(type));
    for (const int64_t num_tokens : {1, 3, 6}) {
        const int64_t rows = random_.integer(1, 50), cols = 32 * random_.integer(1, 20);
        const std::vector<uint8_t> bytes = random_matrix(random_, type, rows, cols);
        const QuantMatrix w{type, bytes.data(), rows, cols, row_size_bytes(type, cols)};
        const std::vector<float> x = random_.normal(size_t(num_tokens * cols));
        QuantizedActivations xq;
        quantize_activations(x.data(), num_tokens, cols, xq);
        std::vector<float> x_rounded(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
            x_rounded[i] = float(xq.codes[i]) * xq.scales[i / 32];
            ASSERT_LE(std::abs(x_rounded[i] - x[i]), 0.5f * xq.scales[i / 32] * 1.0001f);
        }
        const float poison = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> want(size_t(num_tokens * rows), poison), exact(want.size(), poison);
        std::vector<float> fast(want.size(), poison), portable(want.size(), poison);
        quant_matmul_plain(x_rounded.data(), w, want.data(), num_tokens);
        quant_matmul_plain(x.data(), w, exact.data(), num_tokens);
        quant_matmul_fast(xq, w, fast.data());
        quant_matmul_fast(xq, w, portable.data(), QuantKernels::kPortable);
        double scale = 0;
        for (float v : exact) scale = std::max(scale, double(std::abs(v)));
        // The activations' rounding moves each x by at most d_x / 2, so output
        // (t, r) moves by at most sum_c |w_rc| d_x(t, c) / 2: a bound, whatever
        // the draw (a fraction of the output's scale is not one).
        std::vector<float> w_row(static_cast<size_t>(cols));
        std::vector<double> rounding_bound(want.size());
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(type, bytes.data() + r * w.row_bytes, w_row.data(), cols);
            for (int64_t t = 0; t < num_tokens; ++t) {
                double bound = 0;
                for (int64_t c = 0; c < cols; ++c) {
                    bound += std::abs(double(w_row[size_t(c)])) * 0.5 *
                             xq.scales[size_t((t * cols + c) / 32)];
                }
                rounding_bound[size_t(t * rows + r)] = bound;
            }
        }
        for (size_t i = 0; i < want.size(); ++i) {
            const double tolerance = 1e-5 * std::max(scale, 1.0) * std::sqrt(double(cols));
            ASSERT_NEAR(fast[i], want[i], tolerance) << "fast, tokens " << num_tokens;
            ASSERT_NEAR(portable[i], want[i], tolerance) << "portable, tokens " << num_tokens;
            ASSERT_NEAR(fast[i], exact[i], 1.0001 * rounding_bound[i] + tolerance)
                << "vs fp32 activations";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(FastFormats, QuantMatmulFastTest,
                         ::testing::Values(GgmlType::kQ4_1, GgmlType::kQ4_0, GgmlType::kQ8_0),
                         [](const auto& info) {
                             return std::string(ggml_type_traits(info.param).name);
                         });

// The repacked layout (16 rows side by side) must give the same sums as
// the GGUF-layout fast kernel: exactly the product with the quantized
// activations, to float rounding. Both the SIMD kernel (when this CPU has
// AVX-512 VNNI) and the plain loops over the same bytes are checked, for
// token counts that use every tile (8, 4, 2, 1) and leave remainders, and a
// row range leaves the rows outside it untouched.
TEST_P(QuantMatmulFastTest, RepackedLayoutGivesTheSameSums) {
    SCOPED_TRACE(random_.trace());
    const GgmlType type = GetParam();
    for (const int64_t num_tokens : {1, 2, 3, 7, 8, 13}) {
        const int64_t rows = 16 * random_.integer(1, 4), cols = 32 * random_.integer(1, 20);
        ASSERT_TRUE(can_repack(type, rows, cols));
        const std::vector<uint8_t> bytes = random_matrix(random_, type, rows, cols);
        const QuantMatrix w{type, bytes.data(), rows, cols, row_size_bytes(type, cols)};
        const std::vector<uint8_t> repacked = repack_rows(w);
        ASSERT_EQ(repacked.size(), bytes.size())
            << "repacking must not change the bytes per weight";
        const RepackedMatrix packed{type, repacked.data(), rows, cols};
        const std::vector<float> x = random_.normal(size_t(num_tokens * cols));
        QuantizedActivations xq;
        quantize_activations(x.data(), num_tokens, cols, xq);
        const float poison = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> want(size_t(num_tokens * rows), poison);
        quant_matmul_fast(xq, w, want.data(), QuantKernels::kPortable);
        double scale = 0;
        for (float v : want) scale = std::max(scale, double(std::abs(v)));
        const double tolerance = 1e-5 * std::max(scale, 1.0) * std::sqrt(double(cols));
        for (const bool portable : {false, true}) {
            if (!portable && !cpu_runs_repacked()) continue;
            std::vector<float> got(want.size(), poison);
            if (portable) {
                quant_matmul_repacked_rows(xq, packed, got.data(), 0, rows, true);
            } else {
                quant_matmul_repacked(xq, packed, got.data());
            }
            for (size_t i = 0; i < want.size(); ++i) {
                ASSERT_NEAR(got[i], want[i], tolerance)
                    << (portable ? "plain loops" : "AVX-512") << ", tokens " << num_tokens
                    << ", output " << i;
            }
            // Only the second group: the rest stays poisoned.
            if (rows < 32) continue;
            std::fill(got.begin(), got.end(), poison);
            quant_matmul_repacked_rows(xq, packed, got.data(), 16, 32, portable);
            for (int64_t t = 0; t < num_tokens; ++t) {
                for (int64_t r = 0; r < rows; ++r) {
                    const float v = got[size_t(t * rows + r)];
                    if (r >= 16 && r < 32) {
                        ASSERT_NEAR(v, want[size_t(t * rows + r)], tolerance);
                    } else {
                        ASSERT_TRUE(std::isnan(v)) << "row " << r << " is outside the range";
                    }
                }
            }
        }
    }
}

TEST(QuantMatmul, RepackRefusesRowsThatAreNotWholeGroups) {
    std::vector<uint8_t> bytes(size_t(20 * row_size_bytes(GgmlType::kQ4_1, 64)));
    const QuantMatrix w{GgmlType::kQ4_1, bytes.data(), 20, 64, row_size_bytes(GgmlType::kQ4_1, 64)};
    EXPECT_FALSE(can_repack(GgmlType::kQ4_1, 20, 64));
    EXPECT_FALSE(can_repack(GgmlType::kQ4_K, 16, 256));
    EXPECT_NE(test::error_of([&] { repack_rows(w); }).find("16 at a time"), std::string::npos);
}

TEST(QuantMatmul, RefusesARowThatIsNotWholeBlocks) {
    std::vector<uint8_t> bytes(64);
    const QuantMatrix w{GgmlType::kQ4_1, bytes.data(), 1, 40, 25};
    std::vector<float> x(40, 1.0f), y(1);
    EXPECT_NE(test::error_of([&] { quant_matmul(x.data(), w, y.data(), 1); }).find("whole"),
              std::string::npos);
}

}  // namespace
}  // namespace servelab
