// engine_loop.cpp — see engine_loop.h.
#include "reference/server/engine_loop.h"

#include <fmt/format.h>

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

EngineLoop::EngineLoop(Engine& engine, const EngineLoopConfig& config)
    : engine_(engine), config_(config) {
    stats_.num_kv_blocks = engine.kv().cache().num_blocks();
}

std::shared_ptr<RequestStream> EngineLoop::submit(std::vector<TokenId> prompt,
                                                  const SamplingParams& params) {
    auto stream = std::make_shared<RequestStream>();
    {
        std::lock_guard lock(mutex_);
        if (stopping_) {
            ++stats_.total_rejected;
            throw QueueFull("the server is shutting down");
        }
        const int64_t waiting = int64_t(submissions_.size()) + stats_.num_waiting;
        if (waiting >= config_.max_waiting) {
            ++stats_.total_rejected;
            throw QueueFull(
                fmt::format("the server is at capacity: {} requests are waiting", waiting));
        }
        submissions_.push_back({std::move(prompt), params, stream});
    }
    wake_.notify_one();
    return stream;
}

void EngineLoop::stop() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_one();
}

EngineLoopStats EngineLoop::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

// On the engine thread. The on_token callback runs inside Engine::step(),
// also on this thread, and only pushes to the request's own stream.
void EngineLoop::admit(Submission& submission) {
    std::shared_ptr<RequestStream> stream = submission.stream;
    try {
        const int64_t id = engine_.add_request(std::move(submission.prompt), submission.params, 0,
                                               [stream](TokenId token, const std::string& text) {
                                                   StreamEvent event;
                                                   event.token = token;
                                                   event.text = text;
                                                   stream->push(std::move(event));
                                               });
        stream->request_id_ = id;
        live_[id] = stream;
    } catch (const Error& e) {
        StreamEvent end;
        end.kind = StreamEvent::Kind::kEnd;
        end.error = e.what();
        stream->push(std::move(end));
    }
}

bool EngineLoop::cancel_abandoned() {
    bool any = false;
    for (const auto& [id, stream] : live_) {
        // Engine::cancel reports the request among the next step's finished.
        if (stream->cancelled() && engine_.cancel(id)) any = true;
    }
    return any;
}

void EngineLoop::run() {
    while (true) {
        std::deque<Submission> arrived;
        {
            std::unique_lock lock(mutex_);
            // Sleep only when there is nothing to compute.
            wake_.wait(lock, [&] {
                return !submissions_.empty() || engine_.has_unfinished() || stopping_;
            });
            if (stopping_ && submissions_.empty() && !engine_.has_unfinished()) return;
            arrived.swap(submissions_);
        }
        for (Submission& submission : arrived) admit(submission);
        const bool cancelled_some = cancel_abandoned();
        if (!engine_.has_unfinished() && !cancelled_some) continue;
        StepOutput out = engine_.step();
        for (FinishedRequest& finished : out.finished) {
            auto it = live_.find(finished.request_id);
            if (it == live_.end()) continue;
            if (finished.result.finish_reason == FinishReason::kCancelled) {
                std::lock_guard lock(mutex_);
                ++stats_.total_cancelled;
            }
            StreamEvent end;
            end.kind = StreamEvent::Kind::kEnd;
            end.result = std::move(finished.result);
            it->second->push(std::move(end));
            live_.erase(it);
        }
        std::lock_guard lock(mutex_);
        ++stats_.total_steps;
        stats_.num_waiting = out.num_waiting;
        stats_.num_running = out.num_running;
        stats_.num_kv_blocks_used = out.num_kv_blocks_used;
        stats_.total_preemptions += out.num_preempted;
        stats_.total_drafted_tokens += out.num_drafted_tokens;
        stats_.total_accepted_tokens += out.num_accepted_tokens;
        stats_.total_finished += int64_t(out.finished.size());
    }
}

}  // namespace servelab
