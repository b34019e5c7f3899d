// routing_policy.h — which replica a request goes to: round robin, least
// outstanding, or cache-aware (prefix affinity under a load bound).
//
// Part of the distributed layer (chapter 11.7, "routing"). Pure logic: no
// HTTP, no clock, no threads, so each rule is checked by a unit test
// (tests/unit/routing_policy_test.cpp). The caller (backend_pool.h) hands
// it a snapshot of every backend's load and gets back an index.
//
// Why cache-aware: each replica has its own prefix cache. Round robin sends
// requests that share a long system prompt to every replica in turn, so
// each replica computes (and caches) that prompt, and each cache holds a
// third of what it could. Sending a prefix to the replica that saw it last
// turns those prefills into cache hits, and lets N replicas' caches hold N
// times as many distinct prefixes. Affinity alone would pile a popular
// prefix onto one replica while others idle; the load bound caps that.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace servelab {

enum class RoutingPolicyKind { kRoundRobin, kLeastOutstanding, kCacheAware };

// "round-robin", "least-outstanding" or "cache-aware"; throws servelab::Error otherwise.
RoutingPolicyKind parse_routing_policy(const std::string& name);
const char* routing_policy_name(RoutingPolicyKind kind);

// What a policy sees of one backend when it decides.
struct BackendLoad {
    bool available = true;    // healthy, and not already tried for this request
    int64_t outstanding = 0;  // requests forwarded to it and not yet answered in full
};

enum class RouteReason {
    kNoneAvailable,     // every backend is down or already tried
    kRoundRobin,        // round-robin's turn
    kLeastOutstanding,  // least-outstanding's pick
    kAffinityHit,       // cache-aware: the backend that last took this prefix
    kLoadOverride,      // cache-aware: that backend was too busy; the least loaded instead
    kNoMatch,           // cache-aware: no block of the prefix known; the least loaded
};

struct RouteDecision {
    int backend = -1;  // index into the loads; -1 when kNoneAvailable
    RouteReason reason = RouteReason::kNoneAvailable;
    int64_t matched_blocks = 0;  // cache-aware: leading blocks the table knew
};

struct CacheAwareOptions {
    // Affinity is overridden when the affine backend has more than this many
    // outstanding requests above the least loaded available one...
    int64_t balance_abs_threshold = 4;
    // ...and also more than this many times its count. Both must hold: the
    // absolute bound alone would break affinity at high load, where 4 more
    // out of 100 is noise; the ratio alone would break it at low load, where
    // 1 against 0 is no imbalance worth a 400-token prefill.
    double balance_rel_threshold = 1.5;
    int64_t max_table_entries = 100000;  // block keys remembered (LRU beyond)
};

// Block key → the backend that last took a prompt with that prefix, as an
// LRU map of at most max_entries keys. Invariant: lru_ and entries_ hold the
// same keys, lru_ most recently recorded first.
class PrefixAffinityTable {
  public:
    explicit PrefixAffinityTable(int64_t max_entries);

    struct Match {
        int backend = -1;  // -1: no key known with an available backend
        int64_t blocks = 0;
    };
    // The longest prefix of `keys` (a chained key names its whole prefix, so
    // key i known means blocks 0..i were seen together) whose backend is
    // available. Changes nothing.
    Match longest_match(const std::vector<uint64_t>& keys,
                        const std::vector<BackendLoad>& loads) const;
    // Every key → `backend`, now the most recent; evicts the least recent
    // keys beyond max_entries.
    void record(const std::vector<uint64_t>& keys, int backend);

    int64_t size() const { return int64_t(entries_.size()); }
    bool contains(uint64_t key) const { return entries_.count(key) != 0; }

  private:
    struct Entry {
        int backend;
        std::list<uint64_t>::iterator position;  // in lru_
    };
    int64_t max_entries_;
    std::list<uint64_t> lru_;
    std::unordered_map<uint64_t, Entry> entries_;
};

class RoutingPolicy {
  public:
    explicit RoutingPolicy(RoutingPolicyKind kind, CacheAwareOptions options = {});

    // Picks an available backend for a prompt with these chained block keys
    // (prompt_key.h) and, for cache-aware, records the prompt's blocks as
    // now living there. Not thread-safe: the pool calls it under its lock.
    RouteDecision route(const std::vector<uint64_t>& block_keys,
                        const std::vector<BackendLoad>& loads);

    RoutingPolicyKind kind() const { return kind_; }
    const CacheAwareOptions& options() const { return options_; }
    const PrefixAffinityTable& table() const { return table_; }

  private:
    // The available backend with the fewest outstanding requests; ties go to
    // the first at or after cursor_, so that an idle fleet (sequential
    // requests: every count 0) still shares work instead of all of it going
    // to backend 0. -1 if none is available.
    int least_outstanding(const std::vector<BackendLoad>& loads) const;
    int next_round_robin(const std::vector<BackendLoad>& loads) const;
    // True when `affine` is so much busier than `least` that a cache hit
    // is not worth the wait (CacheAwareOptions says when).
    bool overloaded(int64_t affine_outstanding, int64_t least_outstanding) const;

    RoutingPolicyKind kind_;
    CacheAwareOptions options_;
    PrefixAffinityTable table_;
    size_t cursor_ = 0;  // where round robin and tie-breaking start next
};

}  // namespace servelab
