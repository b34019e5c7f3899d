// engine_loop.h — the one thread that owns the Engine, fed by many HTTP handlers.
//
// Part of the serving layer (chapter 11.7). The Engine is not
// thread-safe, and it should not be: continuous batching wants every request
// in ONE loop, so that each step batches all of them. HTTP handlers run on
// the server's worker threads; they hand requests to this loop through a
// locked queue and read their tokens back from a per-request stream:
//
//   handler ── submit_group(prompt, params, n) ──▶ queue ──▶ engine thread:
//                                                        add_parallel_request
//   handler ◀── stream.next() ◀── each step's tokens, pushed after step()
//   handler ── stream.cancel() (client gone) ──▶ engine thread: Engine::cancel
//
// The waiting queue is bounded: submit() refuses (QueueFull) when it holds
// max_waiting requests, so an overloaded server answers 503 at once instead
// of letting latency grow without bound. stop() stops admitting; run()
// returns once the admitted requests have finished, or have been cancelled
// at the drain deadline (SIGTERM's drain).
//
// Several models (`serve --model a --model b`) get one EngineLoop each, all
// driven by ONE thread: run_engine_loops() steps each loop that has work in
// turn, one step each per round. That is the fairness bound a saturated
// model's neighbours get: between two steps of a model with work, every
// other model takes at most one step, so its time per token is at most its
// own step plus one step of each other model. Loops driven together share
// one LoopSignal, so a submission to any of them wakes the driver.
//
// The loops run on the thread that calls run(), and `servelab serve` calls
// it from the main thread, the one that loaded the model. That choice is
// about OpenMP, not HTTP: the kernels open a few hundred parallel regions
// per step, and libgomp lets a team started from a second thread (once the
// main thread has a team of its own, and the threads outnumber the cores)
// spin only briefly before it sleeps, so every region pays a wake-up. On
// the 2-core machine a region cost 3.2 µs from the main thread and 140 µs from
// another (tests/bench/openmp_region_bench.cpp), which made a decode step 3×
// slower (docs/perf.md, "Serving").
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "reference/engine/engine.h"

namespace servelab {

// submit() on a full queue, or after stop().
class QueueFull : public Error {
  public:
    using Error::Error;
};

// What a handler reads from its request's stream, in order: one event per
// generated token (its text may be empty: part of a character, or text a
// stop string holds back), then exactly one end.
struct StreamEvent {
    enum class Kind { kText, kEnd };
    Kind kind = Kind::kText;
    std::string text;                         // kText: the new text
    TokenId token = 0;                        // kText: the token that produced it
    std::optional<SampledLogprobs> logprobs;  // kText: when the request asked for them
    std::optional<GenerationResult> result;   // kEnd: the whole result
    std::string error;                        // kEnd: set when the request failed
};

class RequestStream {
  public:
    // Waits up to `timeout` for the next event; false when none came (the
    // handler can then check whether its client is still connected).
    bool next(StreamEvent& event, std::chrono::milliseconds timeout);
    // The client is gone: the engine cancels the request and frees its
    // blocks at its next iteration. Safe to call more than once.
    void cancel();
    bool cancelled() const;

  private:
    friend class EngineLoop;
    void push(StreamEvent event);

    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<StreamEvent> events_;
    bool cancelled_ = false;
    int64_t request_id_ = -1;  // the engine's id, once admitted
};

struct EngineLoopConfig {
    int64_t max_waiting = 256;  // requests queued or waiting in the engine before 503
};

// Wakes the thread that drives one or more loops: every submit() and stop()
// bumps the generation, so a driver that read generation g before looking
// at its loops, found nothing to do and then waits for "not g" cannot miss
// a submission that came in between.
class LoopSignal {
  public:
    uint64_t generation() const;
    void notify();
    void wait_for_change(uint64_t seen_generation);

  private:
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    uint64_t generation_ = 0;
};

// For /metrics. The gauges are what the engine holds now: they are updated
// when requests are queued, when a step is scheduled (before its forward
// pass, which may take seconds) and when it ends. The counters count
// choices (one engine request each: an HTTP request with n = 3 is three).
struct EngineLoopStats {
    int64_t num_waiting = 0;  // queued for the engine thread, or waiting in the scheduler
    int64_t num_running = 0;
    int64_t num_kv_blocks_used = 0;
    int64_t num_kv_blocks = 0;
    int64_t total_preemptions = 0;
    int64_t total_steps = 0;
    int64_t total_drafted_tokens = 0;
    int64_t total_accepted_tokens = 0;
    int64_t total_finished = 0;        // ended with a finish reason other than "cancelled"
    int64_t total_cancelled = 0;       // ended "cancelled" (client gone, or the drain timed out)
    int64_t total_prefill_tokens = 0;  // prompt tokens computed (not found cached or forked)
};

class EngineLoop {
  public:
    using Clock = std::chrono::steady_clock;

    // The engine must outlive the loop; run() must have returned before the
    // loop is destroyed. Loops that one thread drives together
    // (run_engine_loops) are given the same signal; by default a loop has
    // its own.
    EngineLoop(Engine& engine, const EngineLoopConfig& config,
               std::shared_ptr<LoopSignal> signal = nullptr);
    EngineLoop(const EngineLoop&) = delete;
    EngineLoop& operator=(const EngineLoop&) = delete;

    // Queues a request. Throws QueueFull when max_waiting requests already
    // wait, or after stop(); bad parameters are the Engine's errors, which
    // the stream reports as its end (error set).
    std::shared_ptr<RequestStream> submit(std::vector<TokenId> prompt,
                                          const SamplingParams& params);
    // Queues `num_completions` choices of one prompt (one stream each),
    // admitted together as one parallel request — the prompt computed once,
    // choice i seeded seed + i (Engine::add_parallel_request) — or not at
    // all. Throws QueueFull when they do not all fit under max_waiting.
    // `priority` is the scheduler's (SchedulingPolicy::kPriority; smaller first).
    std::vector<std::shared_ptr<RequestStream>> submit_group(std::vector<TokenId> prompt,
                                                             const SamplingParams& params,
                                                             int num_completions,
                                                             int32_t priority = 0);
    int64_t max_waiting() const { return config_.max_waiting; }
    // The engine's scheduling policy (fixed when it was built; any thread may ask).
    SchedulingPolicy scheduling_policy() const { return engine_.scheduler().policy(); }
    // The engine thread's body for this loop alone: run_engine_loops({this}).
    // Returns after stop(), once every admitted request has ended.
    void run();
    // One turn on the engine thread: admits submissions, cancels abandoned
    // requests, and computes one step if anything is unfinished. Returns
    // whether it stepped.
    bool turn();
    // stop() was called and nothing is queued or unfinished: run() may return.
    bool finished() const;
    const std::shared_ptr<LoopSignal>& signal() const { return signal_; }
    // Stops admitting (submit throws QueueFull from now on) and tells run()
    // to return when the admitted requests are done. Those still running
    // `drain_timeout` after this call are cancelled (their streams end with
    // finish reason "cancelled"), so the drain takes bounded time. Does not wait.
    void stop(std::chrono::milliseconds drain_timeout = std::chrono::milliseconds::max());
    // Never waits for a step in progress.
    EngineLoopStats stats() const;

  private:
    struct Submission {  // one parallel request: a stream per choice
        std::vector<TokenId> prompt;
        SamplingParams params;
        int32_t priority = 0;
        std::vector<std::shared_ptr<RequestStream>> streams;
    };
    void admit(Submission& submission);
    // Cancels the requests whose clients left (all of them once the drain
    // deadline has passed); true if there were any.
    bool cancel_abandoned();
    // Hands each token, then each finished result, to its stream.
    void record_step(StepOutput& out);

    Engine& engine_;
    EngineLoopConfig config_;
    std::shared_ptr<LoopSignal> signal_;
    mutable std::mutex mutex_;  // guards the queue, the stop state, the counters
    std::deque<Submission> submissions_;
    bool stopping_ = false;
    Clock::time_point drain_deadline_ = Clock::time_point::max();
    EngineLoopStats counters_;  // the counters (the gauges are below)

    // The engine thread's own state.
    std::map<int64_t, std::shared_ptr<RequestStream>>
        live_;  // by engine id: admitted, not finished

    // Gauges, written by the engine thread and read by any handler.
    std::atomic<int64_t> queued_{0};  // submitted, not yet admitted
    std::atomic<int64_t> engine_waiting_{0};
    std::atomic<int64_t> engine_running_{0};
    std::atomic<int64_t> kv_blocks_used_{0};
};

// Drives `loops` on the calling thread, one step of each loop that has work
// per round, sleeping when none has; returns once every loop is finished()
// (each was stopped and has drained). The loops must share one LoopSignal.
void run_engine_loops(const std::vector<EngineLoop*>& loops);

}  // namespace servelab
