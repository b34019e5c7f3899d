// ring_all_reduce.cpp — the ring all-reduce over shared memory (Lab 7; see ring_all_reduce.h).
//
// Between GPUs, "rank r sends chunk c to rank r+1" is a copy over a link.
// Here the ranks are threads of one process, so the receiver reads the
// sender's buffer directly. Within one step no two ranks touch the same
// chunk of the same buffer (rank r writes chunk c of its own buffer while
// rank r+1 reads chunk c−1 of it), so only the step boundaries need a barrier.
#include "reference/parallel/ring_all_reduce.h"

namespace servelab {

RingChunk ring_chunk(int64_t count, int num_ranks, int chunk) {
    return {count * chunk / num_ranks, count * (chunk + 1) / num_ranks};
}

void ring_all_reduce(std::span<float* const> buffers, int64_t count, int rank,
                     const std::function<void()>& wait_for_all) {
    // BEGIN SOLUTION lab07
    // HINT: N = buffers.size(); left = (rank + N - 1) % N is this rank's left neighbour
    // HINT: reduce-scatter, steps s = 0..N-2: add chunk (rank - 1 - s) mod N
    // HINT: of buffers[left] into the same chunk of buffers[rank]; then wait_for_all()
    // HINT: all-gather, steps s = 0..N-2: copy chunk (rank - s) mod N
    // HINT: of buffers[left] into buffers[rank]; then wait_for_all()
    const int num_ranks = int(buffers.size());
    const int left = (rank + num_ranks - 1) % num_ranks;
    const auto chunk_index = [num_ranks](int i) {
        return ((i % num_ranks) + num_ranks) % num_ranks;
    };
    float* mine = buffers[size_t(rank)];
    const float* theirs = buffers[size_t(left)];
    // After step s of reduce-scatter, chunk (rank - 1 - s) of this buffer
    // holds the sum over s + 2 ranks; after N−1 steps chunk rank + 1 is complete.
    for (int step = 0; step < num_ranks - 1; ++step) {
        const RingChunk chunk = ring_chunk(count, num_ranks, chunk_index(rank - 1 - step));
        for (int64_t i = chunk.begin; i < chunk.end; ++i) mine[i] += theirs[i];
        wait_for_all();
    }
    // The left neighbour finished chunk `rank` first, then passes on each
    // chunk it receives, one step behind.
    for (int step = 0; step < num_ranks - 1; ++step) {
        const RingChunk chunk = ring_chunk(count, num_ranks, chunk_index(rank - step));
        for (int64_t i = chunk.begin; i < chunk.end; ++i) mine[i] = theirs[i];
        wait_for_all();
    }
    // END SOLUTION
}

}  // namespace servelab
