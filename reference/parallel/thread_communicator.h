// thread_communicator.h — the tensor-parallel ranks as threads of one process.
//
// Part of Lab 7 (chapter 11.7). The simplest back end: N threads, one per
// rank, each with its own shard of the weights and its own engine, sharing
// the process's memory. A collective is then "publish a pointer to my
// buffer, wait for everyone, read the others' buffers, wait again":
// all-reduce is the ring algorithm over those pointers
// (ring_all_reduce.h), the same data movement NCCL does between GPUs.
//
// A rank that fails (throws) must not leave the others waiting forever at
// the next collective: run_thread_ranks aborts the group, every waiting
// rank's collective throws, and the first real error is rethrown to the
// caller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "kernels/common/error.h"
#include "reference/parallel/communicator.h"

namespace servelab {

// What a collective throws when another rank failed and the group gave up.
class RankAborted : public Error {
  public:
    RankAborted() : Error("tensor parallel: another rank failed") {}
};

// The state the N ranks share: a barrier (that can be aborted) and one
// published pointer per rank.
class ThreadGroup {
  public:
    explicit ThreadGroup(int size);
    int size() const { return size_; }

    // Returns when all `size` ranks have arrived; throws RankAborted once the
    // group is aborted. Spins briefly before sleeping: collectives come in
    // quick succession, and waking a sleeping thread costs tens of µs.
    void arrive_and_wait();
    void abort();

    // Published by each rank for the collective in progress.
    std::vector<float*> buffers;       // all-reduce: each rank's buffer
    std::vector<int64_t> lengths;      // its length
    std::vector<const void*> sources;  // gather / broadcast: each rank's input

  private:
    const int size_;
    std::mutex mutex_;
    std::condition_variable wake_;
    int arrived_ = 0;
    std::atomic<int64_t> generation_{0};
    std::atomic<bool> aborted_{false};
};

class ThreadCommunicator final : public Communicator {
  public:
    ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return group_.size(); }
    std::string backend() const override { return "threads"; }

  protected:
    void do_all_reduce_sum(std::span<float> data) override;
    void do_all_gather(std::span<const float> mine, std::span<float> all,
                       std::span<const int64_t> counts) override;
    void do_broadcast(std::span<std::byte> data, int root) override;
    void do_barrier() override { group_.arrive_and_wait(); }

  private:
    ThreadGroup& group_;
    const int rank_;
};

// Runs body(communicator) once per rank: rank 0 on the calling thread (so it
// keeps the terminal), ranks 1..size-1 on new threads; returns when all are
// done. Each rank gets 1/size of OpenMP's threads, so N ranks do not
// oversubscribe the cores. If any rank throws, the others are aborted and
// the first error is rethrown here.
void run_thread_ranks(int size, const std::function<void(Communicator&)>& body);

// The thread machinery alone, for back ends whose communicators exist
// already (NCCL): body(rank) on `size` threads as above; `abort` is called
// once when a rank fails, to release the others from their collectives.
void run_rank_threads(int size, const std::function<void(int rank)>& body,
                      const std::function<void()>& abort);

}  // namespace servelab
