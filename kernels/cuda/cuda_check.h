// cuda_check.h — turn a failed CUDA runtime call into a servelab::Error naming the call.
//
// Part of the CUDA backend (issue 7; all labs). Every host-side CUDA call in
// kernels/cuda goes through SERVELAB_CUDA_CHECK, so a failure (no device,
// out of memory, a bad launch) is one clear error instead of a silently
// wrong result later.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kernels/common/error.h"

namespace servelab::cuda {

inline void check(cudaError_t status, const char* call, const char* file, int line) {
    if (status == cudaSuccess) return;
    throw Error(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(status) + " (" +
                file + ":" + std::to_string(line) + ")");
}

}  // namespace servelab::cuda

#define SERVELAB_CUDA_CHECK(call) ::servelab::cuda::check((call), #call, __FILE__, __LINE__)
