// server_metrics.h — what GET /metrics reports, in Prometheus' text format.
//
// Part of the serving layer (chapter 11.7). Latency histograms
// (TTFT, TPOT, end-to-end) filled as requests finish, and the engine loop's
// gauges and counters (queue, running, KV utilization, preemptions, prefix
// hits, speculative acceptance), rendered on request. Requests (HTTP) and
// choices (engine requests, n per HTTP request) are counted apart. Names follow
// Prometheus' conventions: base units (seconds), `_total` for counters.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/server/engine_loop.h"

namespace servelab {

class Histogram {
  public:
    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double value);
    // The `name_bucket{le=…}`, `name_sum` and `name_count` lines.
    std::string render(const std::string& name, const std::string& help) const;

  private:
    std::vector<double> upper_bounds_;
    std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
    double sum_ = 0.0;
    int64_t count_ = 0;
};

class ServerMetrics {
  public:
    ServerMetrics();
    // A choice that ran to its end (not cancelled or failed): latencies, tokens.
    void record(const GenerationResult& result);
    // What became of one HTTP generation request (all its choices together).
    // Every request the server accepted a body for ends in exactly one of
    // these, or in a 4xx for a bad request.
    void record_request_success();    // answered in full
    void record_request_cancelled();  // its client left, or the drain timed out
    void record_request_rejected();   // 503: at capacity, or shutting down
    void record_http_error(int status);
    std::string render(const EngineLoopStats& loop) const;

  private:
    mutable std::mutex mutex_;
    Histogram ttft_s_;
    Histogram tpot_s_;
    Histogram e2e_s_;
    int64_t prompt_tokens_ = 0;
    int64_t generation_tokens_ = 0;
    int64_t cached_prompt_tokens_ = 0;
    int64_t requests_ok_ = 0;
    int64_t requests_cancelled_ = 0;
    int64_t requests_rejected_ = 0;
    int64_t http_4xx_ = 0;
    int64_t http_5xx_ = 0;
};

}  // namespace servelab
