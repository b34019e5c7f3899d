// kv_memory_sim.h — how much KV memory each allocation policy wastes on a trace.
//
// Lab 4 (chapter 11.4; Kwon et al., 2023, §3 and Fig. 2). Before paging,
// serving systems reserved one contiguous KV region per request, sized for
// the longest sequence it might reach. Most of it sits unused: slots held
// for tokens not generated yet, and slots never used at all (the request
// stops short of the maximum). Paging allocates a block only when the last
// one is full, so a sequence wastes less than one block.
//
// This replays a trace of request lengths (no model: only memory is
// simulated) through a pool of `capacity_tokens` slots, one token per
// running sequence per step, admitting waiting requests first-come
// first-served while they fit:
//   static-max:   reserve max_seq_len slots per request (FasterTransformer, Orca "Max");
//   static-exact: reserve exactly prompt + output slots (Orca "Oracle": knows the
//                 output length in advance, which no real system does);
//   paged:        the engine's own BlockAllocator and BlockTable; blocks on demand.
//                 When a sequence needs a block and none is free, the most
//                 recently admitted sequence is preempted (its blocks freed,
//                 it goes back to the front of the queue and is recomputed).
// Static pools are counted in tokens, with no external fragmentation: the
// static policies look better here than in a real allocator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/experiments/trace.h"

namespace servelab {

enum class ReservationPolicy { kStaticMax, kStaticExact, kPaged };
const char* policy_name(ReservationPolicy policy);  // "static-max", "static-exact", "paged"

struct MemorySimOptions {
    int64_t capacity_tokens = 0;  // the KV budget, in token slots
    int64_t block_size = 16;      // paged only; the pool is capacity_tokens / block_size blocks
    int64_t max_seq_len = 2048;   // static-max's reservation
    int64_t max_running = 256;    // most sequences in a batch (vLLM's max_num_seqs)
};

// Time averages are over steps; "reserved" means held by running sequences.
struct MemorySimResult {
    std::string policy;
    int64_t steps = 0;        // until the last request finishes
    double mean_running = 0;  // sequences decoding at once
    int64_t peak_running = 0;
    double mean_used_tokens = 0;  // slots holding a computed token
    double mean_reserved_tokens = 0;
    // Of the reserved slots: (reserved - used) / reserved, split into slots
    // the sequence will still fill and slots it never will.
    double waste_fraction = 0;
    double waste_future_fraction = 0;
    double waste_never_fraction = 0;
    double pool_used_fraction = 0;  // mean used slots / capacity
    int64_t preemptions = 0;
};

// Throws servelab::Error if a request can never fit (longer than max_seq_len
// for static-max, or than the whole pool) or options are out of range.
MemorySimResult simulate_kv_memory(const std::vector<TraceRequest>& trace, ReservationPolicy policy,
                                   const MemorySimOptions& options);

}  // namespace servelab
