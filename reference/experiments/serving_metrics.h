// serving_metrics.h — what a serving run is judged by: latency per request, throughput overall.
//
// Lab 5 (chapter 11.5, continuous batching). The figures a serving system
// reports (the names follow vLLM's and the OpenAI-serving benchmarks'):
//   queue time  arrival to the first step that computes the request;
//   TTFT        time to first token: arrival to the first token (queue +
//               prefill; what a chat user waits before text appears);
//   TPOT        time per output token after the first, per request:
//               (end-to-end - TTFT) / (output tokens - 1);
//   ITL         inter-token latency: every gap between two consecutive
//               tokens of a request, pooled over all requests (TPOT's mean
//               hides stalls; ITL's p99 shows them);
//   end-to-end  arrival to the last token;
//   throughput  output tokens/s and total (prompt + output) tokens/s over
//               the whole run, requests/s;
//   KV utilization  blocks held by running requests / pool blocks, averaged
//               over the run weighted by step time, and its peak;
//   preemptions and the prefix-cache hit rate (prompt tokens found in the
//               cache / prompt tokens, at each request's first admission).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/engine/generator.h"

namespace servelab {

struct LatencySummary {
    double mean = 0, median = 0, p90 = 0, p99 = 0;  // percentiles interpolate linearly
    int64_t count = 0;
};

// `p` in [0, 100]; 0 for no values.
double percentile(std::vector<double> values, double p);
LatencySummary summarize_latency(const std::vector<double>& values_ms);

// One step of a run, as the engine reported it.
struct StepRecord {
    double start_s = 0;  // since the run began
    double duration_ms = 0;
    int64_t num_batched_tokens = 0;
    int64_t num_prefill_tokens = 0;
    int64_t num_running = 0;
    int64_t num_waiting = 0;
    int64_t num_kv_blocks_used = 0;
    int64_t num_preempted = 0;
};

// One finished request of a run.
struct RequestRecord {
    int64_t trace_id = 0;
    double arrival_s = 0;  // since the run began
    GenerationResult result;
};

struct ServingMetrics {
    int64_t num_requests = 0;
    int64_t prompt_tokens = 0;
    int64_t output_tokens = 0;
    double duration_s = 0;
    double output_tokens_per_s = 0;
    double total_tokens_per_s = 0;
    double requests_per_s = 0;
    LatencySummary queue_ms, ttft_ms, tpot_ms, itl_ms, e2e_ms;
    double kv_utilization_mean = 0;  // in [0, 1]
    double kv_utilization_peak = 0;
    int64_t preemptions = 0;
    double prefix_hit_rate = 0;  // in [0, 1]
    int64_t num_steps = 0;
    double mean_batched_tokens = 0;  // tokens per step
    // Tokens the model computed, all steps together: prompt + output - 1
    // per request at best (fewer with prefix hits); preemption's recompute
    // and static batching's padding rows add to it.
    int64_t tokens_computed = 0;
};

ServingMetrics summarize_run(const std::vector<RequestRecord>& requests,
                             const std::vector<StepRecord>& steps, double duration_s,
                             int64_t num_kv_blocks);

}  // namespace servelab
