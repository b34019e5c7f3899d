// device_buffer.h — an owned array in GPU memory, with copies to and from the host.
//
// Part of the CUDA backend (issue 7; all labs). The one place device memory
// is allocated and freed (RAII), so kernels take plain pointers and sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace servelab::cuda {

template <typename T>
class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t count) : count_(count) {
        if (count > 0) SERVELAB_CUDA_CHECK(cudaMalloc(&data_, count * sizeof(T)));
    }
    ~DeviceBuffer() {
        if (data_ != nullptr) cudaFree(data_);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            if (data_ != nullptr) cudaFree(data_);
            data_ = std::exchange(other.data_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }

    T* data() { return data_; }
    const T* data() const { return data_; }
    size_t size() const { return count_; }

    void upload(std::span<const T> host) {
        if (host.size() != count_) throw Error("DeviceBuffer::upload: size mismatch");
        SERVELAB_CUDA_CHECK(
            cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> host(count_);
        SERVELAB_CUDA_CHECK(
            cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
        return host;
    }
    // Every byte set to `byte` (the tests poison outputs with 0xFF: a NaN in bf16 and f32).
    void fill_bytes(int byte) { SERVELAB_CUDA_CHECK(cudaMemset(data_, byte, count_ * sizeof(T))); }

  private:
    T* data_ = nullptr;
    size_t count_ = 0;
};

}  // namespace servelab::cuda
