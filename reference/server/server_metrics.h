// server_metrics.h — what GET /metrics reports, in Prometheus' text format.
//
// Part of the serving layer (chapter 11.7). Latency histograms
// (TTFT, TPOT, end-to-end) filled as requests finish, and the engine loop's
// gauges and counters (queue, running, KV utilization, preemptions, prefix
// hits, speculative acceptance), rendered on request. Requests (HTTP) and
// choices (engine requests, n per HTTP request) are counted apart. Names follow
// Prometheus' conventions: base units (seconds), `_total` for counters.
//
// A server of several models keeps one ServerMetrics per model, and every
// sample carries its model's label (`servelab_num_requests_running{model="a"}`);
// what belongs to no model (HTTP errors, a request refused before its body
// named one) is counted once, without a label. A family's samples must stay
// together in the text, so each part adds its samples to shared families
// (MetricFamilies) and the text is written once at the end.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/server/engine_loop.h"

namespace servelab {

// The families of one /metrics answer, in the order first added.
class MetricFamilies {
  public:
    // Adds `name{labels} value` to family `name` (created with its type and help).
    void add(const std::string& type, const std::string& name, const std::string& help,
             const std::string& labels, double value);
    // Adds raw sample lines (a histogram's buckets) to family `name`.
    void add_lines(const std::string& type, const std::string& name, const std::string& help,
                   const std::string& lines);
    std::string render() const;

  private:
    struct Family {
        std::string name, type, help, samples;
    };
    Family& family(const std::string& type, const std::string& name, const std::string& help);
    std::vector<Family> families_;
};

// `model="name"` with the name escaped for the text format; "" for no model.
std::string model_label(const std::string& model_name);

class Histogram {
  public:
    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double value);
    // The `name_bucket{labels,le=…}`, `name_sum{labels}` and `name_count{labels}` lines.
    std::string sample_lines(const std::string& name, const std::string& labels) const;

  private:
    std::vector<double> upper_bounds_;
    std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
    double sum_ = 0.0;
    int64_t count_ = 0;
};

// One model's figures.
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
    // Adds this model's samples, labelled `labels` (model_label), to `out`.
    void collect(const EngineLoopStats& loop, const std::string& labels, MetricFamilies& out) const;

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
};

// The server's own figures, which belong to no model: HTTP errors, and
// generation requests refused (503) before their body named a model. The
// router keeps the same figures for its own answers.
class HttpMetrics {
  public:
    void record_http_error(int status);
    void record_request_rejected();
    // An error answer to `method` `path`, sent before any body named a model
    // (the listener's own refusals, the router's answers): an HTTP error,
    // and a rejected request when it is a 503 to a generation request, so
    // that success + cancelled + rejected still adds up to requests sent.
    void record_error_answer(int status, std::string_view method, std::string_view path);
    void collect(MetricFamilies& out) const;

  private:
    mutable std::mutex mutex_;
    int64_t http_4xx_ = 0;
    int64_t http_5xx_ = 0;
    int64_t requests_rejected_ = 0;
};

}  // namespace servelab
