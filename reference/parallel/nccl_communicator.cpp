// nccl_communicator.cpp — see nccl_communicator.h.
#include "reference/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <bit>
#include <numeric>
#include <string>

#include "kernels/common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"

namespace servelab {
namespace {

// An NCCL failure as a servelab::Error naming the call. NCCL's own last
// message usually says more than the code's string (which peer, which
// transport), so it is appended when there is one.
void check_nccl(ncclResult_t result, const char* call) {
    if (result == ncclSuccess) return;
    std::string message = fmt::format("NCCL: {} failed: {}", call, ncclGetErrorString(result));
    const char* detail = ncclGetLastError(nullptr);
    if (detail != nullptr && *detail != '\0') message += fmt::format(" ({})", detail);
    throw Error(message);
}

}  // namespace

struct NcclCommunicator::State {
    int rank = 0;
    int size = 0;
    ncclComm_t comm = nullptr;
    // The rank's own stream: the staging copies and collectives queue here,
    // so they never wait behind (or delay) work on the default stream.
    cudaStream_t stream = nullptr;
    // Where host spans are staged for NCCL. It only grows, so a steady
    // sequence of collectives allocates nothing after the first step.
    cuda::DeviceBuffer<std::byte> staging{0};

    State() = default;
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
        // Possibly run by another thread than the rank's (whoever drops the
        // communicator), so bind to the rank's GPU before freeing its
        // resources. Errors are ignored: a destructor must not throw, and
        // there is nothing left to do about them.
        cudaSetDevice(rank);
        if (comm != nullptr) ncclCommDestroy(comm);
        if (stream != nullptr) cudaStreamDestroy(stream);
        // `staging` is freed after this body, with the device still bound.
    }

    // Every call binds first: the CUDA device is per thread, and the rank's
    // thread may have touched no CUDA before (or another GPU since).
    void bind() const { SERVELAB_CUDA_CHECK(cudaSetDevice(rank)); }

    // A device buffer of at least `bytes`. Grows to the next power of two,
    // so a slowly growing size (a prefill's batch) does not reallocate on
    // every call; the old buffer is freed first to keep the peak down.
    std::byte* staging_of(size_t bytes) {
        if (staging.size() < bytes) {
            staging = cuda::DeviceBuffer<std::byte>(0);
            staging = cuda::DeviceBuffer<std::byte>(std::bit_ceil(bytes));
        }
        return staging.data();
    }

    void copy_in(std::byte* device, const void* host, size_t bytes) {
        if (bytes == 0) return;
        SERVELAB_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
    }
    // Queues the copy back and waits for the stream: the host span is then
    // final, as the Communicator interface promises on return.
    void copy_out_and_wait(void* host, const std::byte* device, size_t bytes) {
        if (bytes > 0) {
            SERVELAB_CUDA_CHECK(
                cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
        }
        SERVELAB_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const {
    return state_->rank;
}

int NcclCommunicator::size() const {
    return state_->size;
}

int NcclCommunicator::device() const {
    return state_->rank;
}

void NcclCommunicator::all_reduce_device(float* device_data, int64_t count, void* cuda_stream) {
    if (count < 0) throw Error(fmt::format("all_reduce_device: {} elements", count));
    if (count == 0) return;  // every rank passes the same count, so every rank skips
    state_->bind();
    check_nccl(ncclAllReduce(device_data, device_data, size_t(count), ncclFloat, ncclSum,
                             state_->comm, static_cast<cudaStream_t>(cuda_stream)),
               "ncclAllReduce");
}

// Nothing checks that the ranks passed the same length: finding out would
// take one more collective per call (the MPI back end does not check
// either). A mismatch is a bug in the caller, and NCCL then hangs or reads
// past the shorter buffers.
void NcclCommunicator::do_all_reduce_sum(std::span<float> data) {
    if (data.empty()) return;
    State& s = *state_;
    s.bind();
    std::byte* staged = s.staging_of(data.size_bytes());
    s.copy_in(staged, data.data(), data.size_bytes());
    check_nccl(ncclAllReduce(staged, staged, data.size(), ncclFloat, ncclSum, s.comm, s.stream),
               "ncclAllReduce");
    s.copy_out_and_wait(data.data(), staged, data.size_bytes());
}

// NCCL's all-gather needs the same count from every rank, and the pieces
// here may differ (a vocabulary that does not divide by N). Padding every
// piece to the largest and compacting afterwards would move the padding
// over the links and need a second buffer and a compaction pass; instead
// each rank's piece is broadcast from that rank straight into its place in
// the gathered buffer. The N broadcasts sit in one group (ncclGroupStart /
// ncclGroupEnd), so NCCL launches them together as one operation, and each
// byte still crosses the links once per receiving rank, as in an all-gather.
// Equal pieces take the same path rather than ncclAllGather: one path, so
// the tests (which use uneven pieces) cover what the engine runs.
void NcclCommunicator::do_all_gather(std::span<const float> mine, std::span<float> all,
                                     std::span<const int64_t> counts) {
    if (all.empty()) return;
    State& s = *state_;
    s.bind();
    auto* gathered = reinterpret_cast<float*>(s.staging_of(all.size_bytes()));
    int64_t my_offset = 0;
    for (int r = 0; r < s.rank; ++r) my_offset += counts[size_t(r)];
    s.copy_in(reinterpret_cast<std::byte*>(gathered + my_offset), mine.data(), mine.size_bytes());
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    int64_t offset = 0;
    ncclResult_t result = ncclSuccess;
    for (int root = 0; root < s.size && result == ncclSuccess; ++root) {
        const int64_t count = counts[size_t(root)];
        // In place: the root sends from, and every other rank receives into,
        // the root's slot. Empty pieces are skipped alike on every rank.
        if (count > 0) {
            result = ncclBroadcast(gathered + offset, gathered + offset, size_t(count), ncclFloat,
                                   root, s.comm, s.stream);
        }
        offset += count;
    }
    // The group is closed even after a failed call, so this thread's NCCL
    // state is not left inside an open group.
    const ncclResult_t end = ncclGroupEnd();
    check_nccl(result, "ncclBroadcast");
    check_nccl(end, "ncclGroupEnd");
    s.copy_out_and_wait(all.data(), reinterpret_cast<const std::byte*>(gathered), all.size_bytes());
}

void NcclCommunicator::do_broadcast(std::span<std::byte> data, int root) {
    if (data.empty()) return;
    State& s = *state_;
    s.bind();
    std::byte* staged = s.staging_of(data.size_bytes());
    const bool is_root = s.rank == root;
    if (is_root) s.copy_in(staged, data.data(), data.size_bytes());
    check_nccl(ncclBroadcast(staged, staged, data.size(), ncclUint8, root, s.comm, s.stream),
               "ncclBroadcast");
    // The root's bytes are already the result: it only waits for the others.
    s.copy_out_and_wait(data.data(), staged, is_root ? 0 : data.size_bytes());
}

// NCCL has no barrier; a one-element all-reduce is one (no rank's finishes
// before every rank has joined it). The element is the staging buffer's
// first: its value does not matter.
void NcclCommunicator::do_barrier() {
    State& s = *state_;
    s.bind();
    std::byte* staged = s.staging_of(sizeof(float));
    check_nccl(ncclAllReduce(staged, staged, 1, ncclFloat, ncclSum, s.comm, s.stream),
               "ncclAllReduce");
    SERVELAB_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int size) {
    if (size < 1) throw Error(fmt::format("--tp-backend nccl: {} ranks", size));
    const cuda::DeviceQuery query = cuda::query_devices();
    if (query.devices.empty()) {
        throw Error(fmt::format("--tp-backend nccl: no usable GPU: {}",
                                query.error.empty() ? "no CUDA devices" : query.error));
    }
    const int gpus = int(query.devices.size());
    if (gpus < size) {
        throw Error(fmt::format("--tp-backend nccl: --tp {} needs {} GPUs, this machine has {}",
                                size, size, gpus));
    }

    // ncclCommInitAll makes the whole clique from this one thread: ranks of
    // one process need no unique id passed around, and no thread per rank
    // yet. Rank r is device r.
    std::vector<int> devices(static_cast<size_t>(size));
    std::iota(devices.begin(), devices.end(), 0);
    std::vector<ncclComm_t> comms(static_cast<size_t>(size), nullptr);
    check_nccl(ncclCommInitAll(comms.data(), size, devices.data()), "ncclCommInitAll");

    // Each handle is owned by its communicator at once, so an error while
    // creating a later stream still destroys every NCCL communicator.
    std::vector<std::unique_ptr<Communicator>> result;
    using State = NcclCommunicator::State;
    std::vector<State*> states;
    for (int r = 0; r < size; ++r) {
        auto state = std::make_unique<State>();
        state->rank = r;
        state->size = size;
        state->comm = comms[size_t(r)];
        states.push_back(state.get());
        std::unique_ptr<Communicator> comm(new NcclCommunicator(std::move(state)));
        result.push_back(std::move(comm));
    }
    for (State* state : states) {
        state->bind();
        // Non-blocking: the rank's copies and collectives must not
        // serialize with whatever else the process runs on the legacy
        // default stream of that GPU.
        SERVELAB_CUDA_CHECK(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
    }
    return result;
}

}  // namespace servelab
