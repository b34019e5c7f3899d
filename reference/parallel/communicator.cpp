// communicator.cpp — see communicator.h.
#include "reference/parallel/communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kernels/common/error.h"

namespace servelab {
namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

void Communicator::all_reduce_sum(std::span<float> data) {
    ++stats_.all_reduce_calls;
    stats_.all_reduce_bytes += int64_t(data.size_bytes());
    const int64_t start = now_ns();
    do_all_reduce_sum(data);
    stats_.all_reduce_ns += now_ns() - start;
}

void Communicator::all_gather(std::span<const float> mine, std::span<float> all,
                              std::span<const int64_t> counts) {
    if (int64_t(counts.size()) != size()) {
        throw Error(fmt::format("all_gather: {} counts for {} ranks", counts.size(), size()));
    }
    int64_t total = 0;
    for (int64_t count : counts) total += count;
    if (int64_t(mine.size()) != counts[size_t(rank())] || int64_t(all.size()) != total) {
        throw Error(fmt::format("all_gather: rank {} passed {} of {} elements into {} of {}",
                                rank(), mine.size(), counts[size_t(rank())], all.size(), total));
    }
    ++stats_.all_gather_calls;
    stats_.all_gather_bytes += int64_t(all.size_bytes());
    const int64_t start = now_ns();
    do_all_gather(mine, all, counts);
    stats_.all_gather_ns += now_ns() - start;
}

void Communicator::broadcast(std::span<std::byte> data, int root) {
    if (root < 0 || root >= size()) {
        throw Error(fmt::format("broadcast: root {} outside [0, {})", root, size()));
    }
    ++stats_.broadcast_calls;
    stats_.broadcast_bytes += int64_t(data.size_bytes());
    do_broadcast(data, root);
}

void SoloCommunicator::do_all_gather(std::span<const float> mine, std::span<float> all,
                                     std::span<const int64_t>) {
    std::copy(mine.begin(), mine.end(), all.begin());
}

}  // namespace servelab
