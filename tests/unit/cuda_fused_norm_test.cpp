// cuda_fused_norm_test.cpp — the fast fused kernels (fused_norm_kernels.h) against the CPU ones.
//
// CUDA backend (issue 7; chapter 11.2, the fast versions). Built only when
// nvcc was found; without a usable GPU every test reports skipped. The
// shapes reach every load width: dim 576 and 4096 (packs of 8), 1002 (pairs),
// 1001 and 3 (single values), and pointers one element off their allocation
// (single values whatever the length). The residual must equal one bf16
// rounding of the fp32 sum exactly; the normalized rows and the SiLU
// products use cuda_kernels_test.cpp's tolerance for bf16 outputs,
// |gpu - cpu| <= 2^-7 |cpu| + 1e-3. Outputs are poisoned (0xFF bytes: NaN
// in bf16) before each launch.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <cuda_bf16.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/fused_norm_kernels.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

using test::bf16;
using test::expect_bf16_close;
using test::on_device;
using test::rounded;
using test::to_bf16;
using test::to_float;

// A device copy of `host` starting `offset` elements into its allocation
// (offset 1: only 2-byte aligned, which forces single-value loads).
class OffsetBuffer {
  public:
    OffsetBuffer(const std::vector<float>& host, size_t offset)
        : offset_(offset), size_(host.size()), buffer_(host.size() + offset) {
        std::vector<bf16> padded(offset, __float2bfloat16(0.0f));
        const std::vector<bf16> values = to_bf16(host);
        padded.insert(padded.end(), values.begin(), values.end());
        buffer_.upload(padded);
    }
    explicit OffsetBuffer(size_t size, size_t offset)  // poisoned, for outputs
        : offset_(offset), size_(size), buffer_(size + offset) {
        buffer_.fill_bytes(0xFF);
    }
    bf16* data() { return buffer_.data() + offset_; }
    std::vector<float> download() const {
        const std::vector<float> all = to_float(buffer_.download());
        return {all.begin() + std::ptrdiff_t(offset_), all.end()};
    }
    size_t size() const { return size_; }

  private:
    size_t offset_;
    size_t size_;
    cuda::DeviceBuffer<bf16> buffer_;
};

class CudaFusedNorm : public test::CudaTest {};

// (rows, dim, offset in elements of every pointer)
using NormShape = std::tuple<int64_t, int64_t, size_t>;
const std::vector<NormShape> kNormShapes = {{1, 576, 0},  {7, 576, 0},  {3, 4096, 0},
                                            {2, 1002, 0}, {5, 1001, 0}, {4, 3, 0},
                                            {1, 1, 0},    {3, 576, 1},  {6, 64, 1}};

TEST_F(CudaFusedNorm, AddRmsNormEqualsTheUnfusedCpuPair) {
    SCOPED_TRACE(random_.trace());
    for (const auto& [rows, dim, offset] : kNormShapes) {
        SCOPED_TRACE(testing::Message() << rows << "x" << dim << " offset " << offset);
        const size_t n = size_t(rows * dim);
        const std::vector<float> x = rounded(random_.normal(n, 2.0f));
        const std::vector<float> delta = rounded(random_.normal(n));
        const std::vector<float> weight = rounded(random_.uniform(size_t(dim), 0.5f, 1.5f));
        std::vector<float> sum = x;
        add_inplace(sum.data(), delta.data(), rows * dim);
        const std::vector<float> new_residual = rounded(sum);  // one rounding of the fp32 sum
        std::vector<float> expected(n);
        // Normalized from the ROUNDED residual, as the unfused RMSNorm reads it.
        rmsnorm_rows(new_residual.data(), weight.data(), expected.data(), rows, dim, 1e-5f);

        OffsetBuffer residual_gpu(x, offset), delta_gpu(delta, offset), weight_gpu(weight, offset);
        OffsetBuffer out(n, offset);
        cuda::add_rmsnorm_bf16(residual_gpu.data(), delta_gpu.data(), weight_gpu.data(), out.data(),
                               rows, dim, 1e-5f, 0);
        EXPECT_EQ(residual_gpu.download(), new_residual);
        expect_bf16_close(out.download(), expected, "add_rmsnorm");
    }
}

TEST_F(CudaFusedNorm, WithoutDeltaItIsAPlainRmsNorm) {
    SCOPED_TRACE(random_.trace());
    for (const auto& [rows, dim, offset] : kNormShapes) {
        SCOPED_TRACE(testing::Message() << rows << "x" << dim << " offset " << offset);
        const size_t n = size_t(rows * dim);
        const std::vector<float> x = rounded(random_.normal(n, 2.0f));
        const std::vector<float> weight = rounded(random_.uniform(size_t(dim), 0.5f, 1.5f));
        std::vector<float> expected(n);
        rmsnorm_rows(x.data(), weight.data(), expected.data(), rows, dim, 1e-5f);

        OffsetBuffer residual_gpu(x, offset), weight_gpu(weight, offset);
        OffsetBuffer out(n, offset);
        cuda::add_rmsnorm_bf16(residual_gpu.data(), nullptr, weight_gpu.data(), out.data(), rows,
                               dim, 1e-5f, 0);
        EXPECT_EQ(residual_gpu.download(), x);  // untouched
        expect_bf16_close(out.download(), expected, "rmsnorm (no delta)");
    }
}

TEST_F(CudaFusedNorm, SiluMulFastEqualsTheCpuSwiglu) {
    SCOPED_TRACE(random_.trace());
    // Every tail after the packs of 8 (n = 1..16), SmolLM2's 1536 per token
    // and more, and offsets giving packs of 8 (0), single values (1) and
    // pairs (2, with an odd n: a one-value tail).
    std::vector<std::pair<int64_t, size_t>> cases = {
        {1536, 0}, {1536 * 5 + 3, 0}, {100003, 0}, {1536, 1}, {1001, 1}, {1536, 2}, {1003, 2}};
    for (int64_t n = 1; n <= 16; ++n) cases.emplace_back(n, 0);
    for (const auto& [n, offset] : cases) {
        SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
        const std::vector<float> gate = rounded(random_.normal(size_t(n), 3.0f));
        const std::vector<float> up = rounded(random_.normal(size_t(n)));
        std::vector<float> expected(static_cast<size_t>(n));
        swiglu(gate.data(), up.data(), expected.data(), n);

        OffsetBuffer gate_gpu(gate, offset), up_gpu(up, offset);
        OffsetBuffer out(size_t(n), offset);
        cuda::silu_mul_fast_bf16(gate_gpu.data(), up_gpu.data(), out.data(), n, 0);
        expect_bf16_close(out.download(), expected, "silu_mul_fast");
    }
}

}  // namespace
}  // namespace servelab
#endif
