// cuda_softmax_test.cpp — the CUDA row softmax against the CPU softmax.
//
// CUDA backend (issue 7) and Lab 1's GPU track (labs/lab01_naive_decoding,
// manifest_cuda.json). Built only when nvcc was found; on a machine without
// a usable GPU every test reports skipped with the runtime's reason. Inputs
// are fresh random fp32 values; outputs are poisoned (0xFF bytes: NaN)
// before each launch, so a kernel that writes nothing fails. Shapes: rows of
// one value, tails that do not divide the block size, SmolLM2's vocabulary
// (49152) and a context-length row. Tolerance: both sides compute in fp32
// from the same inputs, differing only in exp's last bits and the order of
// the sum, so |gpu - cpu| <= 1e-5 |cpu| + 1e-7 per probability.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

#include "kernels/cpu/softmax.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/softmax_kernels.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

// The CPU softmax (kernels/cpu/softmax.h), row by row: the oracle.
std::vector<float> cpu_softmax_rows(std::vector<float> x, int64_t n) {
    for (size_t start = 0; start < x.size(); start += size_t(n)) softmax(x.data() + start, n);
    return x;
}

// Runs the GPU kernel on x (rows x n) into a poisoned output; in place when asked.
std::vector<float> gpu_softmax_rows(const std::vector<float>& x, int64_t n, bool in_place) {
    const int64_t rows = int64_t(x.size()) / n;
    cuda::DeviceBuffer<float> in(x.size());
    in.upload(x);
    if (in_place) {
        cuda::softmax_rows_f32(in.data(), in.data(), rows, n, 0);
        return in.download();
    }
    cuda::DeviceBuffer<float> out(x.size());
    out.fill_bytes(0xFF);
    cuda::softmax_rows_f32(in.data(), out.data(), rows, n, 0);
    return out.download();
}

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
    ASSERT_EQ(gpu.size(), cpu.size());
    if (std::all_of(gpu.begin(), gpu.end(), [](float v) { return std::isnan(v); })) {
        FAIL() << what << ": every output is still the NaN poison: the kernel wrote nothing "
               << "(a skeleton kernel prints 'not implemented' and returns)";
    }
    size_t bad = 0;
    for (size_t i = 0; i < gpu.size(); ++i) {
        if (!(std::fabs(gpu[i] - cpu[i]) <= 1e-5f * std::fabs(cpu[i]) + 1e-7f)) {  // NaN fails
            if (++bad <= 3)
                ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << ", cpu " << cpu[i];
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size() << " values differ";
}

class CudaSoftmax : public test::CudaTest {};

TEST_F(CudaSoftmax, EqualsTheCpuSoftmaxForAnyRowLength) {
    SCOPED_TRACE(random_.trace());
    // 255 and 257: one short of and one past the block; 49152: SmolLM2's vocabulary.
    for (const auto& [rows, n] :
         {std::pair<int64_t, int64_t>{3, 7}, {5, 255}, {4, 257}, {2, 1000}, {2, 49152}}) {
        const std::vector<float> x = random_.normal(size_t(rows * n), 3.0f);
        expect_close(gpu_softmax_rows(x, n, false), cpu_softmax_rows(x, n), "softmax");
    }
}

TEST_F(CudaSoftmax, RowsOfOneValueAreOne) {
    SCOPED_TRACE(random_.trace());
    const std::vector<float> x = random_.normal(37, 100.0f);
    EXPECT_EQ(gpu_softmax_rows(x, 1, false), std::vector<float>(37, 1.0f));
}

TEST_F(CudaSoftmax, LargeMagnitudesDoNotOverflow) {
    SCOPED_TRACE(random_.trace());
    // exp(200) overflows fp32 (max ~3.4e38 = exp(88.7)): only a kernel that
    // subtracts the row's maximum first gets finite probabilities here.
    const int64_t n = 300;
    std::vector<float> x = random_.uniform(size_t(2 * n), 100.0f, 400.0f);
    for (size_t i = size_t(n); i < x.size(); ++i) x[i] = -x[i];  // row 1: all large negative
    const std::vector<float> gpu = gpu_softmax_rows(x, n, false);
    expect_close(gpu, cpu_softmax_rows(x, n), "softmax of large inputs");
    for (int64_t r = 0; r < 2; ++r) {
        const double sum = std::accumulate(gpu.begin() + r * n, gpu.begin() + (r + 1) * n, 0.0);
        EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
    }
}

TEST_F(CudaSoftmax, InPlaceEqualsOutOfPlace) {
    SCOPED_TRACE(random_.trace());
    const int64_t n = 700;  // a long attention row; not a multiple of the block
    const std::vector<float> x = random_.normal(size_t(3 * n), 5.0f);
    expect_close(gpu_softmax_rows(x, n, true), cpu_softmax_rows(x, n), "in-place softmax");
}

TEST_F(CudaSoftmax, ZeroRowsLaunchNothingAndEmptyRowsAreAnError) {
    cuda::softmax_rows_f32(nullptr, nullptr, 0, 5, 0);  // nothing to do, nothing read
    EXPECT_FALSE(test::error_of([] { cuda::softmax_rows_f32(nullptr, nullptr, 1, 0, 0); }).empty());
}

}  // namespace
}  // namespace servelab
#endif
