// device_info.cu — see device_info.h.
#include <cuda_runtime.h>

#include "kernels/cuda/device_info.h"

namespace servelab::cuda {

DeviceQuery query_devices() {
    DeviceQuery query;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        query.error = cudaGetErrorString(status);
        return query;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp props{};
        if (cudaGetDeviceProperties(&props, i) != cudaSuccess) continue;
        query.devices.push_back({i, props.name, props.major, props.minor, props.totalGlobalMem,
                                 props.multiProcessorCount});
    }
    return query;
}

}  // namespace servelab::cuda
