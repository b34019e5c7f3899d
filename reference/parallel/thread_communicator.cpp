// thread_communicator.cpp — see thread_communicator.h.
#include "reference/parallel/thread_communicator.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "reference/parallel/ring_all_reduce.h"

namespace servelab {

ThreadGroup::ThreadGroup(int size)
    : buffers(size_t(size)), lengths(size_t(size)), sources(size_t(size)), size_(size) {
    if (size < 1) throw Error(fmt::format("tensor parallel: {} ranks", size));
}

void ThreadGroup::arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (aborted_) throw RankAborted();
    const int64_t generation = generation_.load();
    if (++arrived_ == size_) {
        arrived_ = 0;
        generation_.store(generation + 1);
        wake_.notify_all();
        return;
    }
    lock.unlock();
    for (int spin = 0; spin < 4000; ++spin) {
        if (generation_.load() != generation) return;
        if (aborted_) throw RankAborted();
        if (spin % 64 == 63) std::this_thread::yield();
    }
    lock.lock();
    wake_.wait(lock, [&] { return generation_.load() != generation || aborted_; });
    if (generation_.load() == generation) throw RankAborted();
}

void ThreadGroup::abort() {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    wake_.notify_all();
}

void ThreadCommunicator::do_all_reduce_sum(std::span<float> data) {
    group_.buffers[size_t(rank_)] = data.data();
    group_.lengths[size_t(rank_)] = int64_t(data.size());
    group_.arrive_and_wait();
    // Every rank sees the same lengths, so every rank throws or none does.
    for (int64_t length : group_.lengths) {
        if (length != int64_t(data.size())) {
            throw Error(
                fmt::format("all_reduce: ranks passed {} and {} elements", length, data.size()));
        }
    }
    ring_all_reduce(group_.buffers, int64_t(data.size()), rank_,
                    [this] { group_.arrive_and_wait(); });
    // No rank may reuse its buffer while a neighbour could still read it.
    group_.arrive_and_wait();
}

void ThreadCommunicator::do_all_gather(std::span<const float> mine, std::span<float> all,
                                       std::span<const int64_t> counts) {
    group_.sources[size_t(rank_)] = mine.data();
    group_.arrive_and_wait();
    int64_t offset = 0;
    for (int r = 0; r < size(); ++r) {
        const auto* piece = static_cast<const float*>(group_.sources[size_t(r)]);
        std::copy(piece, piece + counts[size_t(r)], all.data() + offset);
        offset += counts[size_t(r)];
    }
    group_.arrive_and_wait();
}

void ThreadCommunicator::do_broadcast(std::span<std::byte> data, int root) {
    group_.sources[size_t(rank_)] = data.data();
    group_.lengths[size_t(rank_)] = int64_t(data.size());
    group_.arrive_and_wait();
    if (group_.lengths[size_t(root)] != int64_t(data.size())) {
        throw Error(fmt::format("broadcast: rank {} expects {} bytes, the root sends {}", rank_,
                                data.size(), group_.lengths[size_t(root)]));
    }
    if (rank_ != root) std::memcpy(data.data(), group_.sources[size_t(root)], data.size());
    group_.arrive_and_wait();
}

void run_rank_threads(int size, const std::function<void(int rank)>& body,
                      const std::function<void()>& abort) {
    const int threads_per_rank = std::max(1, omp_get_max_threads() / size);
    std::mutex error_mutex;
    std::exception_ptr first_error;
    const auto run_rank = [&](int rank) {
        omp_set_num_threads(threads_per_rank);
        try {
            body(rank);
        } catch (const RankAborted&) {
            // Another rank failed first; its error is the one to report.
        } catch (...) {
            bool first = false;
            {
                std::lock_guard lock(error_mutex);
                if (!first_error) {
                    first_error = std::current_exception();
                    first = true;
                }
            }
            if (first) abort();
        }
    };
    const int caller_threads = omp_get_max_threads();
    std::vector<std::thread> workers;
    for (int rank = 1; rank < size; ++rank) workers.emplace_back(run_rank, rank);
    run_rank(0);
    for (std::thread& worker : workers) worker.join();
    omp_set_num_threads(caller_threads);
    if (first_error) std::rethrow_exception(first_error);
}

void run_thread_ranks(int size, const std::function<void(Communicator&)>& body) {
    ThreadGroup group(size);
    run_rank_threads(
        size,
        [&](int rank) {
            ThreadCommunicator comm(group, rank);
            body(comm);
        },
        [&] { group.abort(); });
}

}  // namespace servelab
