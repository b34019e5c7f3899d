// scheduler.cpp — see scheduler.h. Lab 5's exercise: chunk_size, schedule_running,
// admit_waiting, pick_victim, preempt.
#include "reference/scheduler/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "kernels/common/error.h"

namespace servelab {

Scheduler::Scheduler(KvBlockManager& kv, const SchedulerConfig& config, int64_t context_length)
    : kv_(kv), config_(config), context_length_(context_length) {
    if (config.max_num_batched_tokens < 1 || config.max_num_seqs < 1) {
        throw Error("scheduler: max_num_batched_tokens and max_num_seqs must be >= 1");
    }
    if (config.long_prefill_tokens < 0) {
        throw Error("scheduler: long_prefill_tokens must be >= 0 (0: no cap)");
    }
}

void Scheduler::add(Request& request) {
    const int64_t prompt = request.num_prompt_tokens;
    if (prompt < 1) throw Error(fmt::format("request {}: the prompt is empty", request.id));
    if (prompt >= context_length_) {
        throw Error(
            fmt::format("request {}: prompt of {} tokens does not fit the context length {}",
                        request.id, prompt, context_length_));
    }
    const int64_t longest = std::min(context_length_, prompt + request.params.max_tokens);
    // Without chunked prefill a step holds a request's whole uncomputed part:
    // its prompt, and after a preemption its prompt and output so far (at
    // most one token short of its longest length). More than the budget
    // could never be scheduled: the request would wait forever.
    const int64_t longest_recompute = longest - 1;
    if (!config_.chunked_prefill && !config_.static_batching &&
        longest_recompute > config_.max_num_batched_tokens) {
        throw Error(fmt::format(
            "request {}: without chunked prefill a step must hold its whole prompt ({} tokens) "
            "and, after a preemption, its output so far: up to {} tokens, more than the token "
            "budget of {} (raise --max-num-batched-tokens, or drop --no-chunked-prefill)",
            request.id, prompt, longest_recompute, config_.max_num_batched_tokens));
    }
    const int64_t block_size = kv_.cache().block_size();
    const int64_t blocks = (longest + block_size - 1) / block_size;
    if (blocks > kv_.cache().num_blocks()) {
        throw Error(
            fmt::format("request {}: up to {} tokens need {} KV blocks, more than the "
                        "pool's {} (raise --kv-memory or lower max_tokens)",
                        request.id, longest, blocks, kv_.cache().num_blocks()));
    }
    request.status = RequestStatus::kWaiting;
    waiting_.push_back(&request);
}

SchedulerOutput Scheduler::schedule() {
    SchedulerOutput out;
    int64_t budget = config_.max_num_batched_tokens;
    // Running requests first, oldest first. Scheduling one may preempt
    // others, so walk a copy and skip those no longer running.
    const std::vector<Request*> running = running_;
    for (Request* request : running) {
        if (budget == 0) break;
        if (request->status == RequestStatus::kRunning) schedule_running(*request, budget, out);
    }
    for (ScheduledChunk& chunk : out.chunks) add_draft_slots(chunk, budget);
    // A step that had to preempt admits nobody: the pool is full.
    if (out.preempted.empty()) {
        if (!config_.static_batching) {
            admit_waiting(budget, out);
        } else if (running_.empty()) {  // the last batch is done: the next one, whole
            admit_waiting(std::numeric_limits<int64_t>::max(), out);
        }
    }
    for (const ScheduledChunk& chunk : out.chunks) out.num_batched_tokens += chunk.num_tokens;
    return out;
}

int64_t Scheduler::chunk_size(const Request& request, int64_t budget) const {
    // BEGIN SOLUTION lab05
    // HINT: its uncomputed tokens, capped by the budget (the next chunk of a long prompt)
    // HINT: fair prefill: cap it at config_.long_prefill_tokens too, but only when that
    // HINT: is not 0, prompts are chunked (chunked_prefill, not static_batching), and
    // HINT: another request runs or waits (count both queues: `request` is in one of them)
    const int64_t num_tokens = std::min(request.num_uncomputed(), budget);
    // Without chunked prefill, and in a static batch, a prompt is computed whole.
    const bool may_cap =
        config_.long_prefill_tokens > 0 && config_.chunked_prefill && !config_.static_batching;
    // `request` is running or still waiting to be admitted: more than one is someone else.
    const bool others = num_running() + num_waiting() > 1;
    if (may_cap && others) return std::min(num_tokens, config_.long_prefill_tokens);
    return num_tokens;  // alone: capping would only delay its first token
    // END SOLUTION
}

void Scheduler::schedule_running(Request& request, int64_t& budget, SchedulerOutput& out) {
    // BEGIN SOLUTION lab05
    // HINT: chunk_size(request, budget) tokens: its next chunk (a decode token is 1)
    // HINT: while kv_.reserve fails: make_room(budget, out); stop if it evicted `request`
    // HINT: then add the chunk to out.chunks and spend the budget
    const int64_t num_tokens = chunk_size(request, budget);
    if (num_tokens == 0) return;
    while (!kv_.reserve(request.kv, num_tokens)) {
        if (make_room(budget, out) == &request) return;  // it was the victim itself
    }
    out.chunks.push_back({&request, num_tokens});
    budget -= num_tokens;
    // END SOLUTION
}

void Scheduler::admit_waiting(int64_t budget, SchedulerOutput& out) {
    // BEGIN SOLUTION lab05
    // HINT: loop while budget, waiting requests and max_num_seqs allow; next_waiting() picks
    // HINT: kv_.start takes the prefix-cache hits; num_uncomputed() is what is left
    // HINT: without chunked prefill the whole rest must fit the budget, else stop admitting
    // HINT: its chunk is chunk_size(request, budget) (while it is still in waiting_)
    // HINT: reserve its chunk; if the pool cannot hold it, kv_.finish and stop (it waits)
    // HINT: admitted: out of waiting_, status kRunning, onto running_, chunk into out
    while (budget > 0 && !waiting_.empty() && num_running() < config_.max_num_seqs) {
        const auto next = next_waiting();
        Request& request = **next;
        request.kv = kv_.start(request.tokens);  // prefix-cache hits count as computed
        const int64_t wanted = request.num_uncomputed();
        if (!config_.chunked_prefill && wanted > budget) {
            kv_.finish(request.kv);
            return;
        }
        // Still in waiting_, so chunk_size counts it among the requests there.
        const int64_t num_tokens = chunk_size(request, budget);
        if (!kv_.reserve(request.kv, num_tokens)) {  // wait until blocks are freed
            kv_.finish(request.kv);
            return;
        }
        waiting_.erase(next);
        request.status = RequestStatus::kRunning;
        running_.push_back(&request);
        out.chunks.push_back({&request, num_tokens});
        budget -= num_tokens;
    }
    // END SOLUTION
}

void Scheduler::add_draft_slots(ScheduledChunk& chunk, int64_t& budget) {
    const Request& request = *chunk.request;
    const int64_t length = int64_t(request.tokens.size());
    // Only a decode step drafts: one new token, after the prompt.
    const bool decoding = request.is_decoding() && chunk.num_tokens == 1 && !request.padding;
    if (!decoding) return;
    // A pass emits the accepted drafts plus one token of the target's own:
    // no draft is worth a slot past max_tokens or past the context.
    const int64_t useful = int64_t(request.params.max_tokens) - request.num_generated() - 1;
    const int64_t wanted =
        std::min({request.num_drafts_ready, useful, budget, context_length_ - length});
    if (wanted <= 0 || !kv_.reserve(chunk.request->kv, wanted)) return;
    chunk.num_tokens += wanted;
    chunk.num_draft_slots = wanted;
    budget -= wanted;
}

Request* Scheduler::make_room(int64_t& budget, SchedulerOutput& out) {
    // A static batch's padding rows go first, and for good: they have finished.
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        Request& row = **it;
        if (!row.padding) continue;
        kv_.finish(row.kv);
        std::erase(running_, &row);
        take_out_of_batch(row, budget, out);
        row.status = RequestStatus::kFinished;
        return &row;
    }
    Request* victim = pick_victim();
    preempt(*victim, budget, out);
    return victim;
}

void Scheduler::take_out_of_batch(const Request& request, int64_t& budget, SchedulerOutput& out) {
    for (auto it = out.chunks.begin(); it != out.chunks.end(); ++it) {
        if (it->request == &request) {
            budget += it->num_tokens;
            out.chunks.erase(it);
            return;
        }
    }
}

Request* Scheduler::pick_victim() {
    // BEGIN SOLUTION lab05
    // HINT: FCFS: the newest running request (running_ is in admission order)
    // HINT: priority: the largest priority value; among equals the newest
    if (config_.policy == SchedulingPolicy::kFcfs) return running_.back();
    Request* victim = running_.back();
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        if ((*it)->priority > victim->priority) victim = *it;
    }
    return victim;
    // END SOLUTION
}

void Scheduler::preempt(Request& victim, int64_t& budget, SchedulerOutput& out) {
    // BEGIN SOLUTION lab05
    // HINT: free its blocks (kv_.finish), take it off running_ and out of this step's batch
    // HINT: (take_out_of_batch refunds the budget); it keeps its tokens to recompute later
    // HINT: back to the FRONT of waiting_ as kWaiting; count it; list it in out.preempted
    kv_.finish(victim.kv);  // recompute later; full blocks may stay in the prefix cache
    std::erase(running_, &victim);
    take_out_of_batch(victim, budget, out);
    victim.status = RequestStatus::kWaiting;
    ++victim.num_preemptions;
    waiting_.push_front(&victim);
    out.preempted.push_back(&victim);
    // END SOLUTION
}

void Scheduler::finish(Request& request) {
    kv_.finish(request.kv);
    std::erase(running_, &request);
    std::erase(waiting_, &request);
    request.status = RequestStatus::kFinished;
}

void Scheduler::add_running(Request& request) {
    request.status = RequestStatus::kRunning;
    running_.push_back(&request);
}

}  // namespace servelab
