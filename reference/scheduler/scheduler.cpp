// scheduler.cpp — see scheduler.h.
#include "reference/scheduler/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "reference/common/error.h"

namespace servelab {

Scheduler::Scheduler(KvBlockManager& kv, const SchedulerConfig& config, int64_t context_length)
    : kv_(kv), config_(config), context_length_(context_length) {
    if (config.max_num_batched_tokens < 1 || config.max_num_seqs < 1) {
        throw Error("scheduler: max_num_batched_tokens and max_num_seqs must be >= 1");
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

void Scheduler::schedule_running(Request& request, int64_t& budget, SchedulerOutput& out) {
    const int64_t num_tokens = std::min(request.num_uncomputed(), budget);
    if (num_tokens == 0) return;
    while (!kv_.reserve(request.kv, num_tokens)) {
        Request* victim = pick_victim();
        preempt(*victim, budget, out);
        if (victim == &request) return;
    }
    out.chunks.push_back({&request, num_tokens});
    budget -= num_tokens;
}

void Scheduler::admit_waiting(int64_t budget, SchedulerOutput& out) {
    while (budget > 0 && !waiting_.empty() && num_running() < config_.max_num_seqs) {
        const auto next = next_waiting();
        Request& request = **next;
        request.kv = kv_.start(request.tokens);  // prefix-cache hits count as computed
        const int64_t wanted = request.num_uncomputed();
        if (!config_.chunked_prefill && wanted > budget) {
            kv_.finish(request.kv);
            return;
        }
        const int64_t num_tokens = std::min(wanted, budget);
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
}

std::deque<Request*>::iterator Scheduler::next_waiting() {
    if (config_.policy == SchedulingPolicy::kFcfs) return waiting_.begin();
    // Smallest priority value first; the queue order (arrival, or preempted
    // first) breaks ties.
    return std::min_element(
        waiting_.begin(), waiting_.end(),
        [](const Request* a, const Request* b) { return a->priority < b->priority; });
}

Request* Scheduler::pick_victim() {
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        if ((*it)->padding) return *it;
    }
    if (config_.policy == SchedulingPolicy::kFcfs) return running_.back();
    // The lowest priority (largest value); among equals the newest.
    Request* victim = running_.back();
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        if ((*it)->priority > victim->priority) victim = *it;
    }
    return victim;
}

void Scheduler::preempt(Request& victim, int64_t& budget, SchedulerOutput& out) {
    kv_.finish(victim.kv);  // recompute later; full blocks may stay in the prefix cache
    std::erase(running_, &victim);
    // If it was already in this step's batch, take it out and refund its tokens.
    for (auto it = out.chunks.begin(); it != out.chunks.end(); ++it) {
        if (it->request == &victim) {
            budget += it->num_tokens;
            out.chunks.erase(it);
            break;
        }
    }
    if (victim.padding) {  // finished already: it just leaves the batch
        victim.status = RequestStatus::kFinished;
        return;
    }
    victim.status = RequestStatus::kWaiting;
    ++victim.num_preemptions;
    waiting_.push_front(&victim);
    out.preempted.push_back(&victim);
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
