// prefix_cache_replay.h — a trace through the scheduler and the KV blocks, without the model.
//
// Lab 11 (chapter 11.7, RadixAttention and cache-aware scheduling). Which
// prefix cache and which admission policy a server runs decides how many
// prompt tokens it must compute; that depends only on the scheduler and the
// block manager, not on what the model computes. So this replays a trace
// through the real Scheduler and KvBlockManager, standing in for the forward
// pass (every scheduled token counts as computed, each request appends
// output ids drawn from its seed until it has its output_tokens), and counts
// what a real run would compute: prefix hits, tokens computed, preemptions.
// It runs in milliseconds, so the notebook can sweep traces and pool sizes,
// and it times the cache itself: Lab 11's throughput case.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/experiments/trace.h"
#include "reference/kv/prefix_index.h"
#include "reference/kv/radix_cache.h"
#include "reference/scheduler/scheduler.h"

namespace servelab {

struct PrefixReplayOptions {
    PrefixCacheKind prefix_cache = PrefixCacheKind::kRadix;
    SchedulerConfig scheduler;  // its policy is the admission policy
    int64_t num_blocks = 512;
    int64_t block_size = 16;
    int64_t vocab_size = 49152;
    int64_t context_length = 8192;
    // With the radix cache: after this many requests have finished, keep a
    // copy of the tree (0: none).
    int64_t snapshot_after = 0;
};

struct PrefixReplayResult {
    int64_t requests = 0;
    int64_t prompt_tokens = 0;
    int64_t cached_prompt_tokens = 0;  // prefix-cache hits at each request's first admission
    int64_t tokens_computed = 0;       // prompt, recomputation and output tokens
    int64_t steps = 0;
    int64_t preemptions = 0;
    int64_t cached_blocks = 0;  // in the prefix cache at the end: with a pool large enough,
                                // the trace's distinct full blocks (its working set)
    double seconds = 0;         // wall time of the whole replay
    std::vector<RadixCache::NodeView> snapshot;
};

// Throws servelab::Error for a request the pool could never hold.
PrefixReplayResult replay_prefix_cache(const std::vector<TraceRequest>& trace,
                                       const PrefixReplayOptions& options);

}  // namespace servelab
