// engine_loop.cpp — see engine_loop.h.
#include "reference/server/engine_loop.h"

#include <fmt/format.h>

#include <algorithm>

namespace servelab {

bool RequestStream::next(StreamEvent& event, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    event = std::move(events_.front());
    events_.pop_front();
    return true;
}

void RequestStream::cancel() {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
}

bool RequestStream::cancelled() const {
    std::lock_guard lock(mutex_);
    return cancelled_;
}

void RequestStream::push(StreamEvent event) {
    {
        std::lock_guard lock(mutex_);
        events_.push_back(std::move(event));
    }
    ready_.notify_one();
}

uint64_t LoopSignal::generation() const {
    std::lock_guard lock(mutex_);
    return generation_;
}

void LoopSignal::notify() {
    {
        std::lock_guard lock(mutex_);
        ++generation_;
    }
    changed_.notify_all();
}

void LoopSignal::wait_for_change(uint64_t seen_generation) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return generation_ != seen_generation; });
}

EngineLoop::EngineLoop(Engine& engine, const EngineLoopConfig& config,
                       std::shared_ptr<LoopSignal> signal)
    : engine_(engine),
      config_(config),
      signal_(signal ? std::move(signal) : std::make_shared<LoopSignal>()) {
    counters_.num_kv_blocks = engine.kv().cache().num_blocks();
}

std::shared_ptr<RequestStream> EngineLoop::submit(std::vector<TokenId> prompt,
                                                  const SamplingParams& params) {
    return submit_group(std::move(prompt), params, 1).front();
}

std::vector<std::shared_ptr<RequestStream>> EngineLoop::submit_group(std::vector<TokenId> prompt,
                                                                     const SamplingParams& params,
                                                                     int num_completions,
                                                                     int32_t priority) {
    Submission submission{std::move(prompt), params, priority, {}};
    for (int i = 0; i < std::max(num_completions, 1); ++i) {
        submission.streams.push_back(std::make_shared<RequestStream>());
    }
    const std::vector<std::shared_ptr<RequestStream>> streams = submission.streams;
    const int64_t n = int64_t(streams.size());
    {
        std::lock_guard lock(mutex_);
        if (stopping_) throw QueueFull("the server is shutting down");
        const int64_t waiting = queued_ + engine_waiting_;
        if (waiting + n > config_.max_waiting) {
            throw QueueFull(
                fmt::format("the server is at capacity: {} requests are waiting (--max-waiting {})",
                            waiting, config_.max_waiting));
        }
        submissions_.push_back(std::move(submission));
        queued_ += n;
    }
    signal_->notify();
    return streams;
}

void EngineLoop::stop(std::chrono::milliseconds drain_timeout) {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        const auto now = Clock::now();
        // Saturate: the default "no timeout" must not overflow the clock.
        const Clock::time_point deadline =
            drain_timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(
                                 Clock::time_point::max() - now)
                ? Clock::time_point::max()
                : now + drain_timeout;
        // A later stop() never extends an earlier one's deadline.
        drain_deadline_ = std::min(drain_deadline_, deadline);
    }
    signal_->notify();
}

EngineLoopStats EngineLoop::stats() const {
    EngineLoopStats stats;
    {
        std::lock_guard lock(mutex_);
        stats = counters_;
    }
    stats.num_waiting = queued_ + engine_waiting_;
    stats.num_running = engine_running_;
    stats.num_kv_blocks_used = kv_blocks_used_;
    return stats;
}

// On the engine thread.
void EngineLoop::admit(Submission& submission) {
    const int64_t n = int64_t(submission.streams.size());
    try {
        const std::vector<int64_t> ids = engine_.add_parallel_request(
            std::move(submission.prompt), submission.params, int(n),
            std::vector<TokenCallback>(size_t(n)), submission.priority);
        for (size_t i = 0; i < ids.size(); ++i) {
            submission.streams[i]->request_id_ = ids[i];
            live_[ids[i]] = submission.streams[i];
        }
        engine_waiting_ += n;  // until the next step is scheduled
    } catch (const Error& e) {
        for (const std::shared_ptr<RequestStream>& stream : submission.streams) {
            StreamEvent end;
            end.kind = StreamEvent::Kind::kEnd;
            end.error = e.what();
            stream->push(std::move(end));
        }
    }
    queued_ -= n;
}

bool EngineLoop::cancel_abandoned() {
    bool past_deadline = false;
    {
        std::lock_guard lock(mutex_);
        past_deadline = stopping_ && Clock::now() >= drain_deadline_;
    }
    bool any = false;
    for (const auto& [id, stream] : live_) {
        // Engine::cancel reports the request among the next step's finished.
        if ((past_deadline || stream->cancelled()) && engine_.cancel(id)) any = true;
    }
    return any;
}

void EngineLoop::run() {
    run_engine_loops({this});
}

bool EngineLoop::finished() const {
    std::lock_guard lock(mutex_);
    return stopping_ && submissions_.empty() && !engine_.has_unfinished();
}

bool EngineLoop::turn() {
    std::deque<Submission> arrived;
    {
        std::lock_guard lock(mutex_);
        arrived.swap(submissions_);
    }
    for (Submission& submission : arrived) admit(submission);
    const bool cancelled_some = cancel_abandoned();
    // A cancelled request is reported by the next step, so step even when
    // it was the last one.
    if (!engine_.has_unfinished() && !cancelled_some) return false;
    StepOutput out = engine_.step([this](const StepScheduled& scheduled) {
        engine_waiting_ = scheduled.num_waiting;
        engine_running_ = scheduled.num_running;
        kv_blocks_used_ = scheduled.num_kv_blocks_used;
    });
    record_step(out);
    return true;
}

void run_engine_loops(const std::vector<EngineLoop*>& loops) {
    if (loops.empty()) return;
    LoopSignal& signal = *loops.front()->signal();
    for (const EngineLoop* loop : loops) {
        if (loop->signal().get() != &signal) {
            throw Error("run_engine_loops: the loops must share one LoopSignal");
        }
    }
    while (true) {
        // Read before looking, so a submission made while we look is not missed.
        const uint64_t seen = signal.generation();
        bool stepped = false;
        for (EngineLoop* loop : loops) stepped = loop->turn() || stepped;
        if (stepped) continue;
        bool all_finished = true;
        for (const EngineLoop* loop : loops) all_finished = all_finished && loop->finished();
        if (all_finished) return;
        // Nothing to compute: sleep until a submit() or stop() on any loop.
        signal.wait_for_change(seen);
    }
}

void EngineLoop::record_step(StepOutput& out) {
    for (TokenEvent& token : out.tokens) {
        auto it = live_.find(token.request_id);
        if (it == live_.end()) continue;
        StreamEvent event;
        event.token = token.token;
        event.text = std::move(token.text);
        event.logprobs = std::move(token.logprobs);
        it->second->push(std::move(event));
    }
    int64_t finished = 0;
    int64_t cancelled = 0;
    for (FinishedRequest& done : out.finished) {
        auto it = live_.find(done.request_id);
        if (it == live_.end()) continue;
        (done.result.finish_reason == FinishReason::kCancelled ? cancelled : finished) += 1;
        StreamEvent end;
        end.kind = StreamEvent::Kind::kEnd;
        end.result = std::move(done.result);
        it->second->push(std::move(end));
        live_.erase(it);
    }
    engine_waiting_ = out.num_waiting;
    engine_running_ = out.num_running;
    kv_blocks_used_ = out.num_kv_blocks_used;
    std::lock_guard lock(mutex_);
    ++counters_.total_steps;
    counters_.total_preemptions += out.num_preempted;
    counters_.total_drafted_tokens += out.num_drafted_tokens;
    counters_.total_accepted_tokens += out.num_accepted_tokens;
    counters_.total_finished += finished;
    counters_.total_cancelled += cancelled;
    counters_.total_prefill_tokens += out.num_prefill_tokens;
}

}  // namespace servelab
