// trace_replay.cpp — see trace_replay.h.
#include "reference/experiments/trace_replay.h"

#include <algorithm>
#include <map>
#include <thread>

#include "kernels/common/error.h"

namespace servelab {
namespace {

using Clock = Engine::Clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}

}  // namespace

ReplayResult replay_trace(Engine& engine, const std::vector<TraceRequest>& trace,
                          int64_t vocab_size, const ReplayOptions& options,
                          const std::function<void(const ReplayProgress&)>& on_progress) {
    if (engine.has_unfinished()) throw Error("replay: the engine already has requests in flight");
    const std::vector<double> arrivals_s =
        poisson_arrivals_s(int64_t(trace.size()), options.request_rate, options.seed);
    std::map<int64_t, std::pair<size_t, double>> in_flight;  // engine id -> (trace index, arrival)
    ReplayResult run;
    ReplayProgress progress;
    progress.total = int64_t(trace.size());

    const Clock::time_point start = Clock::now();
    // With a concurrency limit a request waiting for a free "client" is sent
    // when one frees up: that, not its trace time, is its arrival.
    Clock::time_point slot_freed = start;
    size_t next = 0;
    while (next < trace.size() || engine.has_unfinished()) {
        const Clock::time_point now = Clock::now();
        while (
            next < trace.size() && start + std::chrono::duration<double>(arrivals_s[next]) <= now &&
            (options.max_concurrency == 0 || engine.num_unfinished() < options.max_concurrency)) {
            const Clock::time_point arrival =
                std::max(start + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(arrivals_s[next])),
                         slot_freed);
            SamplingParams params;
            params.max_tokens = int32_t(trace[next].output_tokens);
            params.ignore_eos = true;
            params.num_speculative_tokens = options.num_speculative_tokens;
            params.drafter = options.drafter;
            const int64_t id = engine.add_request(trace_prompt_ids(trace[next], vocab_size), params,
                                                  0, {}, arrival);
            in_flight[id] = {next, seconds_between(start, arrival)};
            ++next;
        }
        if (!engine.has_unfinished()) {  // idle until the next arrival
            std::this_thread::sleep_until(start +
                                          std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(arrivals_s[next])));
            continue;
        }

        StepOutput out = engine.step();
        const Clock::time_point step_end = Clock::now();
        // The engine's own start, not a clock read here just before the
        // call: a request's start_s (its queue time's end) is the engine's,
        // and a step logged a few microseconds earlier than it would seem to
        // begin before the request it prefilled.
        const Clock::time_point step_start = out.started;
        run.steps.push_back({seconds_between(start, step_start),
                             1000.0 * seconds_between(step_start, step_end), out.num_batched_tokens,
                             out.num_prefill_tokens, out.num_running, out.num_waiting,
                             out.num_kv_blocks_used, out.num_preempted});
        progress.output_tokens += int64_t(out.tokens.size());
        for (FinishedRequest& f : out.finished) {
            const auto [index, arrival_s] = in_flight.at(f.request_id);
            in_flight.erase(f.request_id);
            run.requests.push_back({trace[index].id, arrival_s, std::move(f.result)});
            slot_freed = step_end;
        }
        if (on_progress) {
            progress.finished = int64_t(run.requests.size());
            progress.running = out.num_running;
            progress.waiting = out.num_waiting;
            progress.elapsed_s = seconds_between(start, step_end);
            on_progress(progress);
        }
    }
    run.duration_s = seconds_between(start, Clock::now());
    return run;
}

}  // namespace servelab
