// scheduler.h — iteration-level scheduling: which requests compute which tokens this step.
//
// Lab 5 (chapter 11.5, continuous batching; Orca, Yu et al., 2022; vLLM's
// scheduler). Every step the scheduler builds a batch under two limits, a
// token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs):
//   1. running requests first, oldest first: one decode token each, or the
//      next chunk of a prompt still being prefilled;
//   2. then waiting requests, while the budget, the cap and free KV blocks
//      allow: each starts with its prefix-cache hits and computes as much of
//      its prompt as the budget leaves (chunked prefill).
// In both, while another request runs or waits, one request's prompt chunk
// (or recomputation chunk) is also capped at long_prefill_tokens (fair
// prefill): a long prompt then cannot take the whole budget step after step
// while a newcomer's short prompt waits behind it. Alone it still takes the
// whole budget. Decode tokens and draft slots are never capped.
// A finished request leaves at once (the engine calls finish), so the next
// step's batch can take a new one: the batch is re-formed every iteration.
//
// When a running request needs a block and none is free, the scheduler
// preempts by recompute: the victim's blocks are freed, it keeps its tokens
// and goes back to the front of the waiting queue, and later recomputes
// them (cheaply, where the prefix cache still holds its full blocks). The
// victim is the most recently admitted request (FCFS) or the one with the
// lowest priority, newest first (priority policy); a static batch's padding
// rows go first, and for good (they have finished). So the oldest running
// request (FCFS), or the most urgent one (priority), is never preempted and
// always advances: the schedule cannot thrash into no progress. And add()
// refuses any request the whole pool could not hold, so a request running
// alone always fits.
//
// Speculative decoding (Lab 6): after every running request has its token,
// a decoding request that speculates gets slots for the drafts the engine
// already holds for it (Request::num_drafts_ready, at most
// SamplingParams::num_speculative_tokens = K), oldest first, out of what the
// budget leaves — drafted tokens are computed tokens like any other. Drafts
// are optional work: they take only free blocks and never preempt anyone.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "reference/kv/kv_block_manager.h"
#include "reference/scheduler/request.h"

namespace servelab {

// Which waiting request is admitted next:
//   kFcfs      the front of the queue (arrival order; preempted ones first);
//   kPriority  the smallest Request::priority, queue order among equals;
//   kLpm       longest prefix match (SGLang's cache-aware policy, Lab 11):
//              the request whose prompt the prefix cache holds most of, so
//              requests sharing a cached prefix run while it is resident
//              instead of after it has been evicted. Starvation bound: a
//              request that later requests have overtaken lpm_max_overtakes
//              times is admitted before any other (the oldest such first), so
//              no request is overtaken more than lpm_max_overtakes times.
enum class SchedulingPolicy { kFcfs, kPriority, kLpm };

// "fcfs", "priority" or "lpm"; throws servelab::Error for anything else.
SchedulingPolicy parse_scheduling_policy(const std::string& name);

struct SchedulerConfig {
    int64_t max_num_batched_tokens = 512;  // tokens computed per step, all requests together
    int64_t max_num_seqs = 64;             // requests running at once
    SchedulingPolicy policy = SchedulingPolicy::kFcfs;
    bool chunked_prefill = true;  // false: a prompt is admitted only if it fits one step whole
    // Fair prefill (vLLM's long_prefill_token_threshold): while any other
    // request runs or waits, one request computes at most this many tokens of
    // its prompt (or of its recomputation after a preemption) per step, so
    // the rest of the budget stays for the others. Without it a running long
    // prompt is scheduled first and takes the whole budget until it is done,
    // and a short request that arrives meanwhile waits for all of it (Lab 5's
    // handout has the figures). A request alone still takes the whole budget,
    // so its time to first token is unchanged. 0: no cap. Only with
    // chunked prefill: without it, and in static batching, prompts are
    // computed whole. The default, a quarter of the default budget, leaves
    // three quarters of a step to the others while a long prompt still
    // advances by chunks big enough to batch well (128 rows per matmul);
    // more than the budget is the same as 0.
    int64_t long_prefill_tokens = 128;
    // The baseline continuous batching is measured against (request-level
    // batching, as in FasterTransformer or a batched HF generate): a batch is
    // admitted only when the last one has completely ended, and its prompts
    // are computed whole in its first step (no token budget). The batch keeps
    // its shape: a request that finishes stays in it as a padding row
    // (Request::padding; the engine keeps computing and discarding a token
    // for it each step) until the slowest request of the batch is done.
    bool static_batching = false;
    // kLpm: the starvation bound (above), and how many requests from the
    // front of the queue it compares (SGLang also stops sorting a long
    // queue): each comparison walks one prompt through the cache.
    int64_t lpm_max_overtakes = 32;
    int64_t lpm_window = 128;
    // The longest request, prompt and output together, the engine admits
    // (capped_context_length: 0 = the model's context). `servelab serve
    // --max-model-len` lowers it so that a pool below one full context
    // still holds every request it admits.
    int64_t max_model_len = 0;
};

// `request` computes tokens [kv.num_computed_tokens, + num_tokens) this step;
// their slots are reserved. Of those, the last num_draft_slots are for
// drafted tokens (speculative decoding, Lab 6), which the engine fills in.
struct ScheduledChunk {
    Request* request = nullptr;
    int64_t num_tokens = 0;
    int64_t num_draft_slots = 0;
};

struct SchedulerOutput {
    std::vector<ScheduledChunk> chunks;  // running requests first, then newly admitted ones
    std::vector<Request*> preempted;     // sent back to waiting this step
    int64_t num_batched_tokens = 0;
};

class Scheduler {
  public:
    // `kv` must outlive the scheduler; `context_length` caps every request.
    Scheduler(KvBlockManager& kv, const SchedulerConfig& config, int64_t context_length);

    // Queues a request (which must outlive its time in the scheduler).
    // Throws servelab::Error for one that could never run: an empty prompt,
    // a prompt that leaves no room in the context, a longest possible
    // length (prompt + max_tokens, capped at the context) the whole pool
    // cannot hold, or — without chunked prefill — a longest recomputation
    // (that length less one token) over the token budget: such a request
    // would wait, or preempt itself, forever.
    void add(Request& request);
    SchedulerOutput schedule();
    // The request is done (or cancelled): its blocks go back, it leaves.
    void finish(Request& request);
    // Runs `request` from now on without admission: a parallel-sampling
    // sibling that has just forked a running request's blocks.
    void add_running(Request& request);

    int64_t num_waiting() const { return int64_t(waiting_.size()); }
    int64_t num_running() const { return int64_t(running_.size()); }  // padding rows included
    SchedulingPolicy policy() const { return config_.policy; }

  private:
    // How many of its uncomputed tokens `request` (running, or being
    // admitted) computes this step: capped by `budget`, and by
    // long_prefill_tokens while others run or wait.
    int64_t chunk_size(const Request& request, int64_t budget) const;
    void schedule_running(Request& request, int64_t& budget, SchedulerOutput& out);
    void admit_waiting(int64_t budget, SchedulerOutput& out);
    void add_draft_slots(ScheduledChunk& chunk, int64_t& budget);
    // Frees one running request's blocks so another can grow: a static
    // batch's padding row if there is one, else pick_victim()'s choice,
    // preempted. Returns the request that left.
    Request* make_room(int64_t& budget, SchedulerOutput& out);
    Request* pick_victim();
    void preempt(Request& victim, int64_t& budget, SchedulerOutput& out);
    // Removes `request`'s chunk, if any, from this step's batch and refunds its tokens.
    void take_out_of_batch(const Request& request, int64_t& budget, SchedulerOutput& out);
    std::deque<Request*>::iterator next_waiting();
    std::deque<Request*>::iterator longest_prefix_match();

    KvBlockManager& kv_;
    SchedulerConfig config_;
    int64_t context_length_;
    std::deque<Request*> waiting_;
    std::vector<Request*> running_;  // in admission order
};

}  // namespace servelab
