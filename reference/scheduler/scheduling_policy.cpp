// scheduling_policy.cpp — which waiting request the scheduler admits next: FCFS, priority, or
// longest prefix match.
//
// Lab 5 (chapter 11.5) for FCFS and priorities; Lab 11 (chapter 11.7,
// SGLang's cache-aware scheduling) for longest prefix match. See
// SchedulingPolicy in scheduler.h for the rules and the starvation bound.
#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/error.h"
#include "reference/scheduler/scheduler.h"

namespace servelab {

SchedulingPolicy parse_scheduling_policy(const std::string& name) {
    if (name == "fcfs") return SchedulingPolicy::kFcfs;
    if (name == "priority") return SchedulingPolicy::kPriority;
    if (name == "lpm") return SchedulingPolicy::kLpm;
    throw Error(fmt::format("scheduling policy '{}': expected fcfs, priority or lpm", name));
}

std::deque<Request*>::iterator Scheduler::next_waiting() {
    if (config_.policy == SchedulingPolicy::kFcfs) return waiting_.begin();
    if (config_.policy == SchedulingPolicy::kLpm) return longest_prefix_match();
    // Smallest priority value first; the queue order (arrival, or preempted
    // first) breaks ties.
    return std::min_element(
        waiting_.begin(), waiting_.end(),
        [](const Request* a, const Request* b) { return a->priority < b->priority; });
}

std::deque<Request*>::iterator Scheduler::longest_prefix_match() {
    const auto window_end =
        waiting_.begin() +
        std::min<int64_t>(num_waiting(), std::max<int64_t>(1, config_.lpm_window));
    auto chosen = waiting_.begin();
    int64_t chosen_cached = -1;
    for (auto it = waiting_.begin(); it != window_end; ++it) {
        if ((*it)->num_overtaken >= config_.lpm_max_overtakes) {
            chosen = it;  // starving: it goes now, ahead of any prefix
            break;
        }
        // Strictly longer wins, so among equals the queue order decides.
        const int64_t cached = kv_.cached_prefix_tokens((*it)->tokens);
        if (cached > chosen_cached) {
            chosen = it;
            chosen_cached = cached;
        }
    }
    // Everyone ahead of the chosen request is overtaken once more. (Counted
    // when chosen: if the pool then cannot hold it and it stays waiting, the
    // count runs ahead, which only brings the bound sooner.)
    for (auto it = waiting_.begin(); it != chosen; ++it) ++(*it)->num_overtaken;
    return chosen;
}

}  // namespace servelab
