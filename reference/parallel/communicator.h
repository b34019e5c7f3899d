// communicator.h — how the ranks of a tensor-parallel group exchange data.
//
// Part of Lab 7 (chapter 11.7, tensor parallelism). A model split over N
// workers ("ranks") needs only three collective operations:
//   all_reduce_sum  every rank ends with the element-wise sum of every rank's
//                   buffer: joins the partial sums of a row-parallel layer
//                   (attention output, MLP down) and of the vocab-parallel
//                   embedding;
//   all_gather      every rank ends with every rank's piece, in rank order:
//                   the vocab-parallel head's logits;
//   broadcast       rank `root`'s bytes copied to every rank: the tokens rank
//                   0 sampled, so every rank's scheduler decides the same.
// Every rank must call the same operations in the same order with the same
// sizes — a collective is a meeting, and a rank that skips one leaves the
// others waiting. Back ends: threads in one process (thread_communicator.h),
// MPI processes (mpi_communicator.h), NCCL on GPUs (nccl_communicator.h).
//
// The public calls count what they move (CommStats), so the cost model's
// bytes per step can be checked against the counter; the back ends implement
// the protected do_* calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace servelab {

struct CommStats {
    int64_t all_reduce_calls = 0;
    int64_t all_reduce_bytes = 0;  // payload of each call (the buffer), summed
    int64_t all_gather_calls = 0;
    int64_t all_gather_bytes = 0;  // the gathered result's size, summed
    int64_t broadcast_calls = 0;
    int64_t broadcast_bytes = 0;
    // Wall time inside the collectives, waiting for slower ranks included.
    int64_t all_reduce_ns = 0;
    int64_t all_gather_ns = 0;
};

class Communicator {
  public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    // "threads", "mpi", "nccl" or "solo": for logs and reports.
    virtual std::string backend() const = 0;

    // In place: data becomes the sum over ranks. Every rank passes the same length.
    void all_reduce_sum(std::span<float> data);
    // `all` receives rank 0's piece, then rank 1's, …; rank r's piece has
    // counts[r] elements and `mine` is this rank's (counts[rank()] long).
    void all_gather(std::span<const float> mine, std::span<float> all,
                    std::span<const int64_t> counts);
    // Rank `root`'s `data` is copied into every other rank's `data` (same length).
    void broadcast(std::span<std::byte> data, int root);
    void barrier() { do_barrier(); }

    const CommStats& stats() const { return stats_; }

  protected:
    virtual void do_all_reduce_sum(std::span<float> data) = 0;
    virtual void do_all_gather(std::span<const float> mine, std::span<float> all,
                               std::span<const int64_t> counts) = 0;
    virtual void do_broadcast(std::span<std::byte> data, int root) = 0;
    virtual void do_barrier() = 0;

  private:
    CommStats stats_;
};

// One rank alone (N = 1): every collective is the identity. The runner of an
// unsplit model uses it, so the split and unsplit paths are the same code.
class SoloCommunicator final : public Communicator {
  public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::string backend() const override { return "solo"; }

  protected:
    void do_all_reduce_sum(std::span<float>) override {}
    void do_all_gather(std::span<const float> mine, std::span<float> all,
                       std::span<const int64_t> counts) override;
    void do_broadcast(std::span<std::byte>, int) override {}
    void do_barrier() override {}
};

// Broadcasts a vector of trivially copyable values from `root`: its length
// first, then its elements (other ranks' vectors are resized to match).
template <typename T>
void broadcast_vector(Communicator& comm, std::vector<T>& values, int root) {
    static_assert(std::is_trivially_copyable_v<T>);
    int64_t length = int64_t(values.size());
    comm.broadcast(std::as_writable_bytes(std::span(&length, 1)), root);
    values.resize(size_t(length));
    comm.broadcast(std::as_writable_bytes(std::span(values)), root);
}

}  // namespace servelab
