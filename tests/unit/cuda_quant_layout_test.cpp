// cuda_quant_layout_test.cpp — the GPU's Q4_0 / Q4_1 / Q8_0 device layout, checked on the host.
//
// CUDA backend (issue 48, quantized weights on the GPU). Built only with
// nvcc (the packing lives with the CUDA kernels), but it needs no GPU: it
// runs for real on every build machine. A matrix of random GGUF blocks
// (every nibble, scales of either sign) is packed into the device layout
// (kernels/cuda/quant_layout.h) and decoded back from that layout alone;
// each weight must equal the CPU dequantizer's (kernels/cpu/dequantize.cpp)
// for the GGUF bytes, so a scale or a code moved to the wrong block, or a
// nibble order changed, shows up as a named weight. Also: the byte counts
// (the device holds exactly the file's bytes), the 16-byte alignment of
// every block's codes, the one-line errors for what has no layout, and
// the weight-byte estimate the CLI sizes the KV pool with.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <tuple>

#include "kernels/cpu/dequantize.h"
#include "kernels/cuda/quant_layout.h"
#include "reference/device/cuda_weights.h"
#include "tests/unit/quant_test_util.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};

std::string name_of(GgmlType type) {
    return std::string(ggml_type_traits(type).name);
}

TEST(CudaQuantLayout, UnpackedWeightsEqualTheCpuDequantizerForEveryFormatAndShape) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    // One block; several rows of a few blocks; rows of more than 32 blocks
    // and not a multiple of 32 blocks (the GEMV's lanes wrap), SmolLM2's 576.
    const std::tuple<int64_t, int64_t> shapes[] = {{1, 32}, {3, 96}, {17, 576}, {5, 1056}};
    for (GgmlType type : kTypes) {
        for (const auto& [rows, cols] : shapes) {
            SCOPED_TRACE(name_of(type) + " " + std::to_string(rows) + " x " + std::to_string(cols));
            const std::vector<uint8_t> gguf =
                test::random_gguf_blocks(random, type, rows, cols, 1e-3f);
            const cuda::PackedQuantMatrix packed =
                cuda::pack_quant_matrix(type, gguf.data(), gguf.size(), rows, cols);
            const int64_t blocks = rows * cols / 32;
            EXPECT_EQ(int64_t(packed.codes.size()), blocks * cuda::quant_code_bytes(type))
                << "codes: one 16-byte (Q8_0: 32-byte) run per block";
            EXPECT_EQ(int64_t(packed.scales.size()), blocks * cuda::quant_scale_halves(type))
                << "scales: d per block (and m for Q4_1)";
            EXPECT_EQ(int64_t(packed.codes.size() + 2 * packed.scales.size()), int64_t(gguf.size()))
                << "the device layout must hold exactly the file's bytes";
            EXPECT_EQ(cuda::quant_code_bytes(type) % 16, 0)
                << "every block's codes must start on a 16-byte boundary";

            const std::vector<float> got = cuda::unpack_quant_matrix(packed);
            ASSERT_EQ(int64_t(got.size()), rows * cols);
            std::vector<float> want(static_cast<size_t>(cols));
            int64_t bad = 0;
            for (int64_t r = 0; r < rows; ++r) {
                dequantize_row(type, gguf.data() + r * row_size_bytes(type, cols), want.data(),
                               cols);
                for (int64_t c = 0; c < cols; ++c) {
                    const float g = got[size_t(r * cols + c)];
                    if (g == want[size_t(c)]) continue;
                    if (++bad <= 3) {
                        ADD_FAILURE() << "row " << r << " weight " << c << " (block " << c / 32
                                      << ", position " << c % 32 << "): device layout gives " << g
                                      << ", the CPU dequantizer " << want[size_t(c)]
                                      << " (a scale misplaced, d and m swapped, a code in the "
                                         "wrong block, or the nibble order changed?)";
                    }
                }
            }
            EXPECT_EQ(bad, 0);
        }
    }
}

TEST(CudaQuantLayout, RefusesWhatHasNoDeviceLayoutWithOneLine) {
    test::RandomSource random;
    const std::vector<uint8_t> q4_1 =
        test::random_gguf_blocks(random, GgmlType::kQ4_1, 2, 64, 1e-3f);
    EXPECT_NE(test::error_of([&] {
                  cuda::pack_quant_matrix(GgmlType::kQ4_K, q4_1.data(), q4_1.size(), 2, 64);
              }).find("no native GPU layout"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] {
                  cuda::pack_quant_matrix(GgmlType::kQ4_1, q4_1.data(), q4_1.size(), 2, 48);
              }).find("whole 32-weight blocks"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] {
                  cuda::pack_quant_matrix(GgmlType::kQ4_1, q4_1.data(), q4_1.size() - 1, 2, 64);
              }).find("bytes for a matrix of 4 blocks"),
              std::string::npos);
    EXPECT_FALSE(cuda::has_native_gpu_layout(GgmlType::kF16));
    EXPECT_FALSE(cuda::has_native_gpu_layout(GgmlType::kQ6_K));
}

TEST(CudaQuantLayout, DeviceBytesEstimateKeepsFileBytesForNativeProjectionsOnly) {
    // Q4_1: 20 bytes per 32 weights; Q8_0: 34; Q4_0: 18.
    EXPECT_EQ(cuda_tensor_bytes(GgmlType::kQ4_1, 64 * 96, false, GpuWeights::kNative),
              64 * 96 / 32 * 20);
    EXPECT_EQ(cuda_tensor_bytes(GgmlType::kQ8_0, 64 * 96, false, GpuWeights::kNative),
              64 * 96 / 32 * 34);
    EXPECT_EQ(cuda_tensor_bytes(GgmlType::kQ4_0, 64 * 96, false, GpuWeights::kNative),
              64 * 96 / 32 * 18);
    // bf16 everywhere else: the embedding, other types, and the bf16 kind.
    EXPECT_EQ(cuda_tensor_bytes(GgmlType::kQ4_1, 64 * 96, true, GpuWeights::kNative), 2 * 64 * 96)
        << "the token embedding stays bf16 (gathered by row)";
    EXPECT_EQ(cuda_tensor_bytes(GgmlType::kQ4_K, 256, false, GpuWeights::kNative), 2 * 256);
    EXPECT_EQ(cuda_tensor_bytes(GgmlType::kF32, 96, false, GpuWeights::kNative), 2 * 96);
    EXPECT_EQ(cuda_tensor_bytes(GgmlType::kQ4_1, 64 * 96, false, GpuWeights::kBf16), 2 * 64 * 96);
}

TEST(CudaQuantLayout, GpuWeightsNamesRoundTripAndAnUnknownOneIsRefused) {
    EXPECT_EQ(parse_gpu_weights("bf16"), GpuWeights::kBf16);
    EXPECT_EQ(parse_gpu_weights("native"), GpuWeights::kNative);
    EXPECT_STREQ(gpu_weights_name(GpuWeights::kNative), "native");
    EXPECT_NE(test::error_of([] { parse_gpu_weights("fp8"); }).find("expected bf16 or native"),
              std::string::npos);
}

}  // namespace
}  // namespace servelab
#endif
