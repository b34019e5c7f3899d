// serving_metrics.cpp — see serving_metrics.h.
#include "reference/experiments/serving_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace servelab {

double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    // Linear interpolation between the two nearest ranks (numpy's default).
    const double rank = p / 100.0 * double(values.size() - 1);
    const size_t below = size_t(std::floor(rank));
    const size_t above = std::min(below + 1, values.size() - 1);
    const double fraction = rank - double(below);
    return values[below] + fraction * (values[above] - values[below]);
}

LatencySummary summarize_latency(const std::vector<double>& values_ms) {
    LatencySummary s;
    s.count = int64_t(values_ms.size());
    if (values_ms.empty()) return s;
    s.mean = std::accumulate(values_ms.begin(), values_ms.end(), 0.0) / double(values_ms.size());
    s.median = percentile(values_ms, 50);
    s.p90 = percentile(values_ms, 90);
    s.p99 = percentile(values_ms, 99);
    return s;
}

ServingMetrics summarize_run(const std::vector<RequestRecord>& requests,
                             const std::vector<StepRecord>& steps, double duration_s,
                             int64_t num_kv_blocks) {
    ServingMetrics m;
    m.num_requests = int64_t(requests.size());
    m.duration_s = duration_s;
    std::vector<double> queue, ttft, tpot, itl, e2e;
    int64_t cached_tokens = 0;
    for (const RequestRecord& record : requests) {
        const GenerationResult& r = record.result;
        const int64_t num_output = int64_t(r.tokens.size());
        m.prompt_tokens += int64_t(r.prompt_tokens.size());
        m.output_tokens += num_output;
        m.preemptions += r.num_preemptions;
        cached_tokens += r.cached_prompt_tokens;
        queue.push_back(r.timings.queue_ms);
        e2e.push_back(r.timings.total_ms);
        if (num_output == 0) continue;  // cancelled before its first token
        ttft.push_back(r.timings.first_step_ms);
        if (num_output > 1) {
            tpot.push_back((r.timings.total_ms - r.timings.first_step_ms) / double(num_output - 1));
        }
        // step_latency_ms[0] is the TTFT; the rest are the gaps between tokens.
        itl.insert(itl.end(), r.timings.step_latency_ms.begin() + 1,
                   r.timings.step_latency_ms.end());
    }
    m.queue_ms = summarize_latency(queue);
    m.ttft_ms = summarize_latency(ttft);
    m.tpot_ms = summarize_latency(tpot);
    m.itl_ms = summarize_latency(itl);
    m.e2e_ms = summarize_latency(e2e);
    if (duration_s > 0) {
        m.output_tokens_per_s = double(m.output_tokens) / duration_s;
        m.total_tokens_per_s = double(m.prompt_tokens + m.output_tokens) / duration_s;
        m.requests_per_s = double(m.num_requests) / duration_s;
    }
    if (m.prompt_tokens > 0) m.prefix_hit_rate = double(cached_tokens) / double(m.prompt_tokens);

    m.num_steps = int64_t(steps.size());
    double weighted_used = 0, total_ms = 0;
    int64_t batched = 0;
    for (const StepRecord& step : steps) {
        const double used =
            double(step.num_kv_blocks_used) / double(std::max<int64_t>(1, num_kv_blocks));
        weighted_used += used * step.duration_ms;
        total_ms += step.duration_ms;
        m.kv_utilization_peak = std::max(m.kv_utilization_peak, used);
        batched += step.num_batched_tokens;
    }
    if (total_ms > 0) m.kv_utilization_mean = weighted_used / total_ms;
    m.tokens_computed = batched;
    if (!steps.empty()) m.mean_batched_tokens = double(batched) / double(steps.size());
    return m;
}

}  // namespace servelab
