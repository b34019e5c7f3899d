// device_info.h — which CUDA devices this process can use.
//
// Part of the CUDA backend (all labs). Compiled only when nvcc is found
// (SERVELAB_HAVE_CUDA). A machine without a usable GPU reports an error from
// cudaGetDeviceCount rather than a count of 0; both mean "no GPU here", and
// callers (tests, `servelab devices`) treat them the same way.
#pragma once

#include <string>
#include <vector>

namespace servelab::cuda {

struct DeviceInfo {
    int index = 0;
    std::string name;
    int compute_capability_major = 0;
    int compute_capability_minor = 0;
    size_t total_memory_bytes = 0;
    int multiprocessors = 0;
};

struct DeviceQuery {
    std::vector<DeviceInfo> devices;  // empty when no GPU can be used
    std::string error;                // why not, when the runtime said so
};

DeviceQuery query_devices();

}  // namespace servelab::cuda
