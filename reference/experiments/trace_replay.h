// trace_replay.h — drive the engine with a trace's requests as they arrive, and record the run.
//
// Lab 5 (chapter 11.5, continuous batching). The load generator behind
// `servelab bench throughput`: requests arrive at their times (all at once,
// or a Poisson process), at most max_concurrency of them are in the engine
// at a time (like a fixed pool of clients: a new request is sent when one
// finishes), and the engine steps until every request has finished. What
// comes back is every request's result and every step's batch, from which
// serving_metrics computes the figures and the notebook draws the timeline.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/engine/engine.h"
#include "reference/experiments/serving_metrics.h"
#include "reference/experiments/trace.h"

namespace servelab {

struct ReplayOptions {
    double request_rate = 0;      // requests/s (Poisson arrivals); <= 0: all at once
    int64_t max_concurrency = 0;  // requests in the engine at once; 0: no limit
    // Speculative decoding for every request (Lab 6): K drafts per step
    // from the engine's drafter of this name; 0 = off.
    int32_t num_speculative_tokens = 0;
    std::string drafter;
    uint64_t seed = 0;  // of the arrival process
};

struct ReplayProgress {
    int64_t finished = 0;
    int64_t total = 0;
    int64_t output_tokens = 0;
    int64_t running = 0;
    int64_t waiting = 0;
    double elapsed_s = 0;
};

struct ReplayResult {
    std::vector<RequestRecord> requests;  // in the order they finished
    std::vector<StepRecord> steps;
    double duration_s = 0;
};

// Replays `trace` through `engine` (which must be idle). Each request's
// prompt is trace_prompt_ids; it generates exactly output_tokens tokens
// (greedy, ignore_eos). `on_progress` (optional) is called after every step.
// Throws servelab::Error (from the engine) for a request that could never run.
ReplayResult replay_trace(Engine& engine, const std::vector<TraceRequest>& trace,
                          int64_t vocab_size, const ReplayOptions& options,
                          const std::function<void(const ReplayProgress&)>& on_progress = {});

}  // namespace servelab
