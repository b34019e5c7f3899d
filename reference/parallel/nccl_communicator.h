// nccl_communicator.h — the tensor-parallel ranks as GPUs of one process, talking through NCCL.
//
// Part of Lab 7 (chapter 11.7). One thread per rank, rank r driving GPU r;
// the collectives are NCCL's (ncclAllReduce, ncclBroadcast), which move the
// data over NVLink or PCIe between the GPUs without passing through the host.
// The N communicators are made together by one call (ncclCommInitAll), then
// each is handed to its rank's thread: every call binds the calling thread to
// the communicator's GPU first, so the thread needs no other setup.
//
// The Communicator interface works on host memory, because the CPU engine
// calls it: each host-span collective stages its buffer on the GPU (copy in,
// collective, copy out, wait). That round trip costs far more than the
// collective itself for small buffers — it is here so the CPU engine can
// exercise the NCCL path end to end. A GPU runner, whose activations already
// live on the device, calls all_reduce_device instead and stays on its stream.
//
// Compiled only where CMake finds NCCL (SERVELAB_HAVE_NCCL); this header
// names no CUDA or NCCL type, so host-only code may include it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "reference/parallel/communicator.h"

namespace servelab {

class NcclCommunicator final : public Communicator {
  public:
    // The CUDA and NCCL handles of one rank (defined in the .cpp).
    struct State;
    ~NcclCommunicator() override;  // never throws; frees the communicator, stream and buffers
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    int rank() const override;
    int size() const override;
    std::string backend() const override { return "nccl"; }
    // The CUDA device this rank drives (equal to rank()).
    int device() const;

    // For a GPU runner: `count` floats at `device_data` (memory of device())
    // become their sum over ranks, in place. Enqueued on `cuda_stream` (a
    // cudaStream_t; nullptr is the legacy default stream) and not waited for.
    // Not counted in stats(): CommStats counts only the host-span calls.
    void all_reduce_device(float* device_data, int64_t count, void* cuda_stream);

  protected:
    void do_all_reduce_sum(std::span<float> data) override;
    void do_all_gather(std::span<const float> mine, std::span<float> all,
                       std::span<const int64_t> counts) override;
    void do_broadcast(std::span<std::byte> data, int root) override;
    void do_barrier() override;

  private:
    friend std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int size);
    explicit NcclCommunicator(std::unique_ptr<State> state);

    std::unique_ptr<State> state_;
};

// One communicator per rank for `size` GPUs of this process (devices
// 0..size-1), element r for rank r's thread. Each rank's thread must make
// the same collective calls in the same order (communicator.h). Throws
// servelab::Error when CUDA reports no usable GPU (with the runtime's
// reason) or when the machine has fewer than `size` GPUs.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int size);

}  // namespace servelab
