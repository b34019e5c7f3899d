// server_metrics.cpp — see server_metrics.h.
#include "reference/server/server_metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace servelab {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
    const auto bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
    ++counts_[size_t(bucket - upper_bounds_.begin())];
    sum_ += value;
    ++count_;
}

std::string Histogram::sample_lines(const std::string& name, const std::string& labels) const {
    const std::string prefix = labels.empty() ? "" : labels + ",";
    const std::string braces = labels.empty() ? "" : "{" + labels + "}";
    std::string out;
    int64_t cumulative = 0;
    for (size_t i = 0; i < upper_bounds_.size(); ++i) {
        cumulative += counts_[i];
        out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, prefix, upper_bounds_[i],
                           cumulative);
    }
    out += fmt::format("{}_bucket{{{}le=\"+Inf\"}} {}\n", name, prefix, count_);
    out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces, sum_, name, braces, count_);
    return out;
}

MetricFamilies::Family& MetricFamilies::family(const std::string& type, const std::string& name,
                                               const std::string& help) {
    for (Family& f : families_) {
        if (f.name == name) return f;
    }
    families_.push_back({name, type, help, ""});
    return families_.back();
}

void MetricFamilies::add(const std::string& type, const std::string& name, const std::string& help,
                         const std::string& labels, double value) {
    family(type, name, help).samples +=
        fmt::format("{}{} {}\n", name, labels.empty() ? "" : "{" + labels + "}", value);
}

void MetricFamilies::add_lines(const std::string& type, const std::string& name,
                               const std::string& help, const std::string& lines) {
    family(type, name, help).samples += lines;
}

std::string MetricFamilies::render() const {
    std::string out;
    for (const Family& f : families_) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
        out += f.samples;
    }
    return out;
}

std::string model_label(const std::string& model_name) {
    if (model_name.empty()) return "";
    // The text format's escapes inside a label value: backslash, quote, newline.
    std::string escaped;
    for (const char c : model_name) {
        if (c == '\\' || c == '"') escaped += '\\';
        if (c == '\n') {
            escaped += "\\n";
            continue;
        }
        escaped += c;
    }
    return "model=\"" + escaped + "\"";
}

namespace {

// Seconds: from a fast decode step (a few ms) to a long generation.
std::vector<double> latency_buckets_s() {
    return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

}  // namespace

ServerMetrics::ServerMetrics()
    : ttft_s_(latency_buckets_s()), tpot_s_(latency_buckets_s()), e2e_s_(latency_buckets_s()) {}

void ServerMetrics::record(const GenerationResult& result) {
    std::lock_guard lock(mutex_);
    const GenerationTimings& t = result.timings;
    ttft_s_.observe(t.first_step_ms / 1000.0);
    e2e_s_.observe(t.total_ms / 1000.0);
    if (result.tokens.size() > 1) {
        tpot_s_.observe((t.total_ms - t.first_step_ms) / 1000.0 / double(result.tokens.size() - 1));
    }
    prompt_tokens_ += int64_t(result.prompt_tokens.size());
    generation_tokens_ += int64_t(result.tokens.size());
    cached_prompt_tokens_ += result.cached_prompt_tokens;
}

void ServerMetrics::record_request_success() {
    std::lock_guard lock(mutex_);
    ++requests_ok_;
}

void ServerMetrics::record_request_cancelled() {
    std::lock_guard lock(mutex_);
    ++requests_cancelled_;
}

void ServerMetrics::record_request_rejected() {
    std::lock_guard lock(mutex_);
    ++requests_rejected_;
}

void ServerMetrics::collect(const EngineLoopStats& loop, const std::string& labels,
                            MetricFamilies& out) const {
    std::lock_guard lock(mutex_);
    const auto histogram = [&](const std::string& name, const std::string& help,
                               const Histogram& h) {
        out.add_lines("histogram", name, help, h.sample_lines(name, labels));
    };
    const auto gauge = [&](const std::string& name, const std::string& help, double value) {
        out.add("gauge", name, help, labels, value);
    };
    const auto counter = [&](const std::string& name, const std::string& help, double value) {
        out.add("counter", name, help, labels, value);
    };
    histogram("servelab_time_to_first_token_seconds",
              "time from arrival to the first generated token", ttft_s_);
    histogram("servelab_time_per_output_token_seconds",
              "mean time between a request's tokens after its first", tpot_s_);
    histogram("servelab_e2e_request_latency_seconds", "time from arrival to the last token",
              e2e_s_);
    gauge("servelab_num_requests_waiting", "requests queued, not yet running",
          double(loop.num_waiting));
    gauge("servelab_num_requests_running", "requests in the running batch",
          double(loop.num_running));
    gauge("servelab_kv_cache_usage_ratio", "share of the KV pool's blocks held by running requests",
          loop.num_kv_blocks > 0 ? double(loop.num_kv_blocks_used) / double(loop.num_kv_blocks)
                                 : 0.0);
    gauge("servelab_kv_cache_blocks", "blocks in the model's KV pool", double(loop.num_kv_blocks));
    counter("servelab_engine_steps_total", "engine steps (forward passes) computed",
            double(loop.total_steps));
    counter("servelab_num_preemptions_total", "requests preempted (recomputed)",
            double(loop.total_preemptions));
    counter("servelab_prompt_tokens_total", "prompt tokens of finished requests",
            double(prompt_tokens_));
    counter("servelab_prefill_tokens_computed_total",
            "prompt tokens the forward pass computed (prefix-cache hits and the shared "
            "prompt of n choices are computed once, or not at all)",
            double(loop.total_prefill_tokens));
    counter("servelab_prefix_cache_hit_tokens_total", "prompt tokens found in the prefix cache",
            double(cached_prompt_tokens_));
    counter("servelab_generation_tokens_total", "tokens generated", double(generation_tokens_));
    counter("servelab_spec_decode_draft_tokens_total", "speculative drafts verified",
            double(loop.total_drafted_tokens));
    counter("servelab_spec_decode_accepted_tokens_total", "speculative drafts accepted",
            double(loop.total_accepted_tokens));
    counter("servelab_request_success_total", "HTTP generation requests answered in full",
            double(requests_ok_));
    counter("servelab_request_cancelled_total",
            "HTTP generation requests cancelled: the client left, or the drain timed out",
            double(requests_cancelled_));
    counter("servelab_request_rejected_total",
            "HTTP generation requests refused with 503 (at capacity, or shutting down)",
            double(requests_rejected_));
    counter("servelab_choices_finished_total", "choices (n per request) that ran to their end",
            double(loop.total_finished));
    counter("servelab_choices_cancelled_total", "choices (n per request) cancelled",
            double(loop.total_cancelled));
}

void HttpMetrics::record_http_error(int status) {
    std::lock_guard lock(mutex_);
    if (status >= 500) {
        ++http_5xx_;
    } else if (status >= 400) {
        ++http_4xx_;
    }
}

void HttpMetrics::record_request_rejected() {
    std::lock_guard lock(mutex_);
    ++requests_rejected_;
}

void HttpMetrics::record_error_answer(int status, std::string_view method, std::string_view path) {
    if (status < 400) return;
    record_http_error(status);
    if (status == 503 && method == "POST" && path.substr(0, 4) == "/v1/") record_request_rejected();
}

void HttpMetrics::collect(MetricFamilies& out) const {
    std::lock_guard lock(mutex_);
    // Unlabelled: refused before a body named a model. Summed with the
    // labelled samples, every refusal is counted once.
    out.add("counter", "servelab_request_rejected_total",
            "HTTP generation requests refused with 503 (at capacity, or shutting down)", "",
            double(requests_rejected_));
    out.add("counter", "servelab_http_4xx_total", "client errors answered", "", double(http_4xx_));
    out.add("counter", "servelab_http_5xx_total", "server errors answered", "", double(http_5xx_));
}

}  // namespace servelab
