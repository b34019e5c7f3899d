// ring_all_reduce.h — the ring all-reduce over ranks that share memory (Lab 7).
//
// Part of Lab 7 (chapter 11.7). The algorithm NCCL and Horovod made standard
// (Patarasuk & Yuan, 2009): split each rank's buffer into N chunks;
//   reduce-scatter: N−1 steps; in each, every rank adds one chunk of its left
//                   neighbour into its own. Afterwards rank r holds the full
//                   sum of chunk (r + 1) mod N;
//   all-gather:     N−1 steps; in each, every rank copies one finished chunk
//                   from its left neighbour.
// Each rank moves 2(N−1)/N of the buffer in total — the same for any N, which
// is why the ring is bandwidth-optimal — and every rank ends with the very
// same bits, because each chunk is summed once, on one rank, then copied.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace servelab {

// The chunk of a `count`-long buffer that ring steps move: chunk c of N
// covers [c·count/N, (c+1)·count/N), so chunk sizes differ by at most one.
struct RingChunk {
    int64_t begin = 0;
    int64_t end = 0;
};
RingChunk ring_chunk(int64_t count, int num_ranks, int chunk);

// Sums `count` floats over ranks, in place: rank r's buffer is buffers[r],
// and afterwards every buffer holds the sum. This rank is `rank`; every rank
// calls this at once with the same `buffers`. `wait_for_all()` is a barrier
// over all ranks: call it after every step, so that no rank reads a chunk
// its neighbour is still writing.
void ring_all_reduce(std::span<float* const> buffers, int64_t count, int rank,
                     const std::function<void()>& wait_for_all);

}  // namespace servelab
