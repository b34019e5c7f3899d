// cuda_quant_gemv_test.cpp — the quantized-weight GPU kernels against the CPU's dequantized
// weights.
//
// CUDA backend (issue 48, quantized weights on the GPU). Built only with
// nvcc; without a usable GPU every GPU test reports skipped with the
// runtime's reason. Weights are random GGUF blocks (every nibble, scales of
// either sign) of Q4_0, Q4_1 and Q8_0, packed into the device layout; the
// reference is y = x · Wᵀ in double over the CPU dequantizer's weights
// (kernels/cpu/dequantize.cpp, which cuda_quant_layout_test.cpp shows the
// layout reproduces) and the bf16-rounded activations the GPU reads.
// Shapes: one block, rows that leave the last warp short, rows of more than
// 32 blocks and not a multiple of 32 (lanes wrap), SmolLM2's 576; every
// token count 1..8. Outputs are poisoned (0xFF: NaN) before each launch.
// Bounds, per output (what each kernel may differ by, and no more):
//   plain GEMV: its bf16 rounding (2^-8 |y|) plus fp32 summation
//     (1e-5 Σ|w·x|);
//   fast GEMV: also the activations' int8 rounding, at most d_x / 2 per
//     value, so Σ_blocks d_x/2 · Σ|w|; and the fp32 rounding of its
//     decomposed terms d·d_x·Σq·c and m·d_x·Σc, which may each be larger
//     than their sum (1e-5 Σ_blocks (q_max |d| + |m|) Σ|x|);
//   dequantize_to_bf16: exact (the CPU's weights rounded to bf16).
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "kernels/cpu/dequantize.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/quant_dequantize.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_layout.h"
#include "tests/unit/cuda_test_util.h"
#include "tests/unit/quant_test_util.h"

namespace servelab {
namespace {

using test::bf16;

constexpr GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};
const std::tuple<int64_t, int64_t> kShapes[] = {
    {1, 32}, {7, 96}, {13, 576}, {130, 1056}, {67, 4128}};

std::string name_of(GgmlType type, int64_t rows, int64_t cols) {
    return std::string(ggml_type_traits(type).name) + " " + std::to_string(rows) + " x " +
           std::to_string(cols);
}

// A random matrix: its packed blocks on the device, its weights on the host.
struct DeviceQuantMatrix {
    cuda::PackedQuantMatrix packed;
    std::vector<float> weights;  // (rows, cols), from the device layout
    cuda::DeviceBuffer<uint8_t> codes{0};
    cuda::DeviceBuffer<uint16_t> scales{0};
    cuda::QuantMatrixView view() const {
        return {packed.type, codes.data(), scales.data(), packed.rows, packed.cols};
    }
    // The block's d and m as the kernels use them (Q4_0: m = −8d).
    float d(int64_t block) const {
        return fp16_to_float(packed.scales[size_t(block * cuda::quant_scale_halves(packed.type))]);
    }
    float m(int64_t block) const {
        if (packed.type == GgmlType::kQ4_1)
            return fp16_to_float(packed.scales[size_t(2 * block + 1)]);
        return packed.type == GgmlType::kQ4_0 ? -8.0f * d(block) : 0.0f;
    }
};

DeviceQuantMatrix random_matrix(test::RandomSource& random, GgmlType type, int64_t rows,
                                int64_t cols) {
    const std::vector<uint8_t> gguf = test::random_gguf_blocks(random, type, rows, cols, 1e-3f);
    DeviceQuantMatrix m;
    m.packed = cuda::pack_quant_matrix(type, gguf.data(), gguf.size(), rows, cols);
    m.weights = cuda::unpack_quant_matrix(m.packed);
    m.codes = test::on_device(m.packed.codes);
    m.scales = test::on_device(m.packed.scales);
    return m;
}

// The reference output and its error bound, per (token, row).
struct Reference {
    std::vector<double> y;
    std::vector<double> bound;
};

// y = x · Wᵀ in double; bound as the header says, with the fast kernel's
// terms when `int8_activations`, and the bf16 output rounding unless `f32_out`.
Reference reference(const DeviceQuantMatrix& w, const std::vector<float>& x, int64_t tokens,
                    bool int8_activations, bool f32_out) {
    const int64_t rows = w.packed.rows, cols = w.packed.cols, blocks = cols / 32;
    const double q_max = w.packed.type == GgmlType::kQ8_0 ? 127.0 : 15.0;
    Reference ref{std::vector<double>(size_t(tokens * rows)),
                  std::vector<double>(size_t(tokens * rows))};
    for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            double y = 0, magnitude = 0, rounding = 0, decomposed = 0;
            for (int64_t b = 0; b < blocks; ++b) {
                double abs_x = 0, abs_w = 0, x_max = 0;
                for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
                    const double wi = w.weights[size_t(r * cols + i)], xi = x[size_t(t * cols + i)];
                    y += wi * xi;
                    magnitude += std::fabs(wi * xi);
                    abs_x += std::fabs(xi);
                    abs_w += std::fabs(wi);
                    x_max = std::max(x_max, std::fabs(xi));
                }
                rounding += x_max / 127.0 / 2.0 * abs_w;
                const int64_t block = r * blocks + b;
                decomposed += (q_max * std::fabs(w.d(block)) + std::fabs(w.m(block))) * abs_x;
            }
            double bound = 1e-5 * magnitude + 1e-6;
            if (int8_activations) bound += 1.01 * rounding + 1e-5 * decomposed;
            if (!f32_out) bound += 0.00390625 * std::fabs(y);  // 2^-8: bf16's rounding, with room
            ref.y[size_t(t * rows + r)] = y;
            ref.bound[size_t(t * rows + r)] = bound;
        }
    }
    return ref;
}

void expect_within(const std::vector<float>& got, const Reference& ref, int64_t rows,
                   const std::string& what) {
    ASSERT_EQ(got.size(), ref.y.size());
    int64_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::fabs(double(got[i]) - ref.y[i]) <= ref.bound[i]) continue;  // NaN fails
        if (++bad <= 3) {
            ADD_FAILURE() << what << ": token " << int64_t(i) / rows << " row " << int64_t(i) % rows
                          << ": gpu " << got[i] << ", reference " << ref.y[i] << " (bound "
                          << ref.bound[i]
                          << "; NaN: an output left unwritten, a wrong row or token stride, or "
                             "a block read from the wrong place)";
        }
    }
    EXPECT_EQ(bad, 0) << what;
}

class CudaQuantGemv : public test::CudaTest {
  protected:
    // Random bf16-exact activations (tokens, cols), as floats.
    std::vector<float> random_x(int64_t tokens, int64_t cols) {
        return test::rounded(random_.normal(size_t(tokens * cols)));
    }
    // x quantized on the device into freshly poisoned buffers.
    cuda::QuantizedActivationsView quantize(const cuda::DeviceBuffer<bf16>& x, int64_t tokens,
                                            int64_t cols) {
        codes_ = cuda::DeviceBuffer<int8_t>(size_t(tokens * cols));
        scales_ = cuda::DeviceBuffer<float2>(size_t(tokens * cols / 32));
        codes_.fill_bytes(0x7F);
        scales_.fill_bytes(0xFF);
        const cuda::QuantizedActivationsView view{codes_.data(), scales_.data(), tokens, cols};
        cuda::quantize_activations_int8(x.data(), view, 0);
        return view;
    }
    cuda::DeviceBuffer<int8_t> codes_{0};
    cuda::DeviceBuffer<float2> scales_{0};
};

TEST_F(CudaQuantGemv, PlainGemvEqualsTheDequantizedReference) {
    SCOPED_TRACE(random_.trace());
    for (GgmlType type : kTypes) {
        for (const auto& [rows, cols] : kShapes) {
            const DeviceQuantMatrix w = random_matrix(random_, type, rows, cols);
            for (int64_t tokens = 1; tokens <= cuda::kQuantGemvMaxTokens; ++tokens) {
                const std::string what = "plain " + name_of(type, rows, cols) + ", " +
                                         std::to_string(tokens) + " tokens";
                const std::vector<float> x = random_x(tokens, cols);
                const auto x_gpu = test::on_device(test::to_bf16(x));
                cuda::DeviceBuffer<bf16> y(size_t(tokens * rows));
                y.fill_bytes(0xFF);
                cuda::quant_gemv_plain(w.view(), x_gpu.data(), y.data(), tokens, 0);
                expect_within(test::to_float(y.download()), reference(w, x, tokens, false, false),
                              rows, what);
            }
        }
    }
}

TEST_F(CudaQuantGemv, QuantizedActivationsAreWithinHalfAStepOfTheirValues) {
    SCOPED_TRACE(random_.trace());
    const int64_t tokens = 5, cols = 576;
    std::vector<float> x = random_x(tokens, cols);
    for (int i = 64; i < 96; ++i) x[size_t(i)] = 0.0f;  // one all-zero block: scale 0, codes 0
    const auto x_gpu = test::on_device(test::to_bf16(x));
    quantize(x_gpu, tokens, cols);
    const std::vector<int8_t> codes = codes_.download();
    const std::vector<float2> scales = scales_.download();
    for (int64_t block = 0; block < tokens * cols / 32; ++block) {
        float x_max = 0.0f;
        int code_sum = 0;
        for (int64_t i = block * 32; i < block * 32 + 32; ++i)
            x_max = std::max(x_max, std::fabs(x[size_t(i)]));
        const float d = scales[size_t(block)].x;
        ASSERT_NEAR(d, x_max / 127.0f, 1e-6f * x_max)
            << "block " << block << ": d_x must be max|x| / 127";
        for (int64_t i = block * 32; i < block * 32 + 32; ++i) {
            const int code = codes[size_t(i)];
            code_sum += code;
            ASSERT_LE(std::fabs(float(code) * d - x[size_t(i)]), 0.5001f * d + 1e-30f)
                << "value " << i << ": code " << code << " is not x / d_x rounded to nearest";
        }
        ASSERT_NEAR(scales[size_t(block)].y, d * float(code_sum), 1e-5f * std::fabs(d) * 32 * 127)
            << "block " << block << ": the second scale must be d_x · Σ codes";
    }
}

TEST_F(CudaQuantGemv, FastGemvIsWithinTheActivationRoundingOfTheReference) {
    SCOPED_TRACE(random_.trace());
    for (GgmlType type : kTypes) {
        for (const auto& [rows, cols] : kShapes) {
            const DeviceQuantMatrix w = random_matrix(random_, type, rows, cols);
            for (int64_t tokens = 1; tokens <= cuda::kQuantGemvMaxTokens; ++tokens) {
                const std::string what =
                    "fast " + name_of(type, rows, cols) + ", " + std::to_string(tokens) + " tokens";
                const std::vector<float> x = random_x(tokens, cols);
                const auto x_gpu = test::on_device(test::to_bf16(x));
                const cuda::QuantizedActivationsView xq = quantize(x_gpu, tokens, cols);
                cuda::DeviceBuffer<bf16> y(size_t(tokens * rows));
                y.fill_bytes(0xFF);
                cuda::quant_gemv_fast(w.view(), xq, y.data(), 0);
                expect_within(test::to_float(y.download()), reference(w, x, tokens, true, false),
                              rows, what);
            }
        }
    }
}

TEST_F(CudaQuantGemv, Fp32OutputVariantsWriteTheSameProducts) {
    SCOPED_TRACE(random_.trace());
    const int64_t rows = 130, cols = 1056, tokens = 3;
    for (GgmlType type : kTypes) {
        const DeviceQuantMatrix w = random_matrix(random_, type, rows, cols);
        const std::vector<float> x = random_x(tokens, cols);
        const auto x_gpu = test::on_device(test::to_bf16(x));
        cuda::DeviceBuffer<float> y(size_t(tokens * rows));
        y.fill_bytes(0xFF);
        cuda::quant_gemv_plain_f32_out(w.view(), x_gpu.data(), y.data(), tokens, 0);
        expect_within(y.download(), reference(w, x, tokens, false, true), rows,
                      "plain f32 out " + name_of(type, rows, cols));
        const cuda::QuantizedActivationsView xq = quantize(x_gpu, tokens, cols);
        y.fill_bytes(0xFF);
        cuda::quant_gemv_fast_f32_out(w.view(), xq, y.data(), 0);
        expect_within(y.download(), reference(w, x, tokens, true, true), rows,
                      "fast f32 out " + name_of(type, rows, cols));
    }
}

TEST_F(CudaQuantGemv, DequantizeToBf16EqualsTheCpuWeightsRoundedToBf16) {
    SCOPED_TRACE(random_.trace());
    for (GgmlType type : kTypes) {
        for (const auto& [rows, cols] : kShapes) {
            const DeviceQuantMatrix w = random_matrix(random_, type, rows, cols);
            cuda::DeviceBuffer<bf16> out(size_t(rows * cols));
            out.fill_bytes(0xFF);
            cuda::dequantize_to_bf16(w.view(), out.data(), 0);
            const std::vector<float> got = test::to_float(out.download());
            const std::vector<float> want = test::rounded(w.weights);
            int64_t bad = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                if (got[i] == want[i]) continue;
                if (++bad <= 3) {
                    ADD_FAILURE() << name_of(type, rows, cols) << " weight " << i << " (row "
                                  << int64_t(i) / cols << ", block " << int64_t(i) % cols / 32
                                  << "): gpu " << got[i] << ", cpu " << want[i]
                                  << " (NaN: a block not written; else a fused d·q + m, or a "
                                     "code or scale read from the wrong block)";
                }
            }
            EXPECT_EQ(bad, 0) << name_of(type, rows, cols);
        }
    }
}

// Host-side checks: they throw before any launch, so they run without a GPU too.
TEST(CudaQuantGemvShapes, RefusesTokenCountsOutsideOneToEightAndMismatchedColumns) {
    const cuda::QuantMatrixView w{GgmlType::kQ4_1, nullptr, nullptr, 64, 96};
    EXPECT_NE(test::error_of([&] {
                  cuda::quant_gemv_plain(w, nullptr, nullptr, 9, 0);
              }).find("9 tokens; the GEMV takes 1 to 8"),
              std::string::npos);
    EXPECT_NE(
        test::error_of([&] { cuda::quant_gemv_plain(w, nullptr, nullptr, 0, 0); }).find("0 tokens"),
        std::string::npos);
    const cuda::QuantizedActivationsView x{nullptr, nullptr, 2, 128};
    EXPECT_NE(test::error_of([&] {
                  cuda::quant_gemv_fast(w, x, nullptr, 0);
              }).find("activations of 128 columns against a matrix of 96"),
              std::string::npos);
    const cuda::QuantMatrixView k_quant{GgmlType::kQ4_K, nullptr, nullptr, 64, 256};
    EXPECT_NE(test::error_of([&] {
                  cuda::dequantize_to_bf16(k_quant, nullptr, 0);
              }).find("not Q4_0, Q4_1 or Q8_0"),
              std::string::npos);
}

}  // namespace
}  // namespace servelab
#endif
