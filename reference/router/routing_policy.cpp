// routing_policy.cpp — see routing_policy.h.
#include "reference/router/routing_policy.h"

#include "kernels/common/error.h"

namespace servelab {

RoutingPolicyKind parse_routing_policy(const std::string& name) {
    if (name == "round-robin") return RoutingPolicyKind::kRoundRobin;
    if (name == "least-outstanding") return RoutingPolicyKind::kLeastOutstanding;
    if (name == "cache-aware") return RoutingPolicyKind::kCacheAware;
    throw Error("unknown routing policy '" + name +
                "' (round-robin, least-outstanding or cache-aware)");
}

const char* routing_policy_name(RoutingPolicyKind kind) {
    switch (kind) {
        case RoutingPolicyKind::kRoundRobin:
            return "round-robin";
        case RoutingPolicyKind::kLeastOutstanding:
            return "least-outstanding";
        case RoutingPolicyKind::kCacheAware:
            return "cache-aware";
    }
    return "?";
}

PrefixAffinityTable::PrefixAffinityTable(int64_t max_entries) : max_entries_(max_entries) {
    if (max_entries_ < 1) throw Error("the prefix affinity table needs at least one entry");
}

PrefixAffinityTable::Match PrefixAffinityTable::longest_match(
    const std::vector<uint64_t>& keys, const std::vector<BackendLoad>& loads) const {
    // From the longest prefix down: the first known key whose backend can
    // take the request. A shorter prefix on an available backend beats a
    // longer one on a backend that is down.
    for (size_t i = keys.size(); i-- > 0;) {
        const auto found = entries_.find(keys[i]);
        if (found == entries_.end()) continue;
        const int backend = found->second.backend;
        if (backend < int(loads.size()) && loads[size_t(backend)].available) {
            return {backend, int64_t(i) + 1};
        }
    }
    return {};
}

void PrefixAffinityTable::record(const std::vector<uint64_t>& keys, int backend) {
    for (const uint64_t key : keys) {
        const auto found = entries_.find(key);
        if (found != entries_.end()) {
            found->second.backend = backend;
            lru_.splice(lru_.begin(), lru_, found->second.position);
            continue;
        }
        lru_.push_front(key);
        entries_.emplace(key, Entry{backend, lru_.begin()});
        if (int64_t(entries_.size()) > max_entries_) {
            entries_.erase(lru_.back());
            lru_.pop_back();
        }
    }
}

RoutingPolicy::RoutingPolicy(RoutingPolicyKind kind, CacheAwareOptions options)
    : kind_(kind), options_(options), table_(options.max_table_entries) {}

int RoutingPolicy::least_outstanding(const std::vector<BackendLoad>& loads) const {
    int best = -1;
    for (size_t step = 0; step < loads.size(); ++step) {
        const size_t i = (cursor_ + step) % loads.size();
        if (!loads[i].available) continue;
        if (best < 0 || loads[i].outstanding < loads[size_t(best)].outstanding) best = int(i);
    }
    return best;
}

int RoutingPolicy::next_round_robin(const std::vector<BackendLoad>& loads) const {
    for (size_t step = 0; step < loads.size(); ++step) {
        const size_t i = (cursor_ + step) % loads.size();
        if (loads[i].available) return int(i);
    }
    return -1;
}

bool RoutingPolicy::overloaded(int64_t affine_outstanding, int64_t least_outstanding) const {
    return affine_outstanding - least_outstanding > options_.balance_abs_threshold &&
           double(affine_outstanding) > options_.balance_rel_threshold * double(least_outstanding);
}

RouteDecision RoutingPolicy::route(const std::vector<uint64_t>& block_keys,
                                   const std::vector<BackendLoad>& loads) {
    RouteDecision decision;
    const int least = least_outstanding(loads);
    if (least < 0) return decision;  // kNoneAvailable
    switch (kind_) {
        case RoutingPolicyKind::kRoundRobin:
            decision = {next_round_robin(loads), RouteReason::kRoundRobin, 0};
            break;
        case RoutingPolicyKind::kLeastOutstanding:
            decision = {least, RouteReason::kLeastOutstanding, 0};
            break;
        case RoutingPolicyKind::kCacheAware: {
            const PrefixAffinityTable::Match match = table_.longest_match(block_keys, loads);
            if (match.backend < 0) {
                decision = {least, RouteReason::kNoMatch, 0};
            } else if (overloaded(loads[size_t(match.backend)].outstanding,
                                  loads[size_t(least)].outstanding)) {
                decision = {least, RouteReason::kLoadOverride, match.blocks};
            } else {
                decision = {match.backend, RouteReason::kAffinityHit, match.blocks};
            }
            // The chosen backend now computes (and caches) this prefix, so it
            // is the one the next request with the same prefix should find.
            table_.record(block_keys, decision.backend);
            break;
        }
    }
    cursor_ = size_t(decision.backend + 1) % loads.size();
    return decision;
}

}  // namespace servelab
