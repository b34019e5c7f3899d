// cuda_test_util.h — what every CUDA test shares: bf16 conversions, device copies, the bf16
// tolerance and the skip on machines without a GPU.
//
// CUDA backend (issue 7). Include only where SERVELAB_HAVE_CUDA is defined.
#pragma once

#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "tests/unit/test_util.h"

namespace servelab::test {

using bf16 = __nv_bfloat16;

inline std::vector<bf16> to_bf16(const std::vector<float>& values) {
    std::vector<bf16> out;
    for (float v : values) out.push_back(__float2bfloat16(v));
    return out;
}

inline std::vector<float> to_float(const std::vector<bf16>& values) {
    std::vector<float> out;
    for (bf16 v : values) out.push_back(__bfloat162float(v));
    return out;
}

// The bf16 values as floats: what the GPU kernels actually read.
inline std::vector<float> rounded(const std::vector<float>& values) {
    return to_float(to_bf16(values));
}

template <typename T>
cuda::DeviceBuffer<T> on_device(const std::vector<T>& host) {
    cuda::DeviceBuffer<T> buffer(host.size());
    buffer.upload(host);
    return buffer;
}

// A bf16 result against the fp32 CPU result (docs/correctness.md): its own
// rounding (relative 2^-8) plus the fp32 arithmetic's, so
// |gpu - cpu| <= 2^-7 |cpu| + 1e-3. NaN (the poison) always fails.
inline void expect_bf16_close(const std::vector<float>& gpu, const std::vector<float>& cpu,
                              const char* what) {
    ASSERT_EQ(gpu.size(), cpu.size());
    size_t bad = 0;
    for (size_t i = 0; i < gpu.size(); ++i) {
        const float bound = 0.0078125f * std::fabs(cpu[i]) + 1e-3f;
        if (!(std::fabs(gpu[i] - cpu[i]) <= bound)) {
            if (++bad <= 3)
                ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << ", cpu " << cpu[i];
        }
    }
    EXPECT_EQ(bad, 0u) << what;
}

// The fixture of every CUDA test: on a machine without a usable GPU each
// test reports skipped, with the runtime's reason. A derived SetUp calls
// this one first and returns if IsSkipped().
class CudaTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const cuda::DeviceQuery query = cuda::query_devices();
        if (query.devices.empty()) {
            GTEST_SKIP() << "no usable GPU: " << (query.error.empty() ? "no devices" : query.error);
        }
    }
    RandomSource random_;
};

}  // namespace servelab::test
