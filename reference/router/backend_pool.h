// backend_pool.h — the replicas behind the router: their addresses, health
// and load, and the one lock under which a request is given to one of them.
//
// Part of the distributed layer (chapter 11.7, "routing"). A background
// thread GETs each backend's /health every interval; a backend that fails
// (no connection, a timeout, any status but 200) is taken out, and comes
// back when it passes again. The router also takes a backend out at once
// when a forward to it fails at the transport level, so requests stop
// going to a dead replica before the next probe notices.
// Thread-safe: every member may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "reference/router/routing_policy.h"

namespace servelab {

// A backend's address: "http://HOST:PORT" (a trailing "/" is allowed; no
// path, no https: the replicas are servelab servers on a trusted network).
struct BackendUrl {
    std::string host;
    int port = 0;
    std::string text() const { return "http://" + host + ":" + std::to_string(port); }
};

// Throws servelab::Error, one line naming `url`, when it is not http://HOST:PORT.
BackendUrl parse_backend_url(const std::string& url);

struct HealthCheckOptions {
    std::chrono::milliseconds interval{1000};  // between two probes of a backend
    std::chrono::milliseconds timeout{1000};   // connect, and then the answer
};

// What /metrics shows of one backend.
struct BackendStats {
    std::string url;
    bool healthy = false;
    int64_t outstanding = 0;     // forwarded, not yet answered in full
    int64_t requests_total = 0;  // forwards sent to it, retries included
};

class BackendPool {
  public:
    // Every backend starts healthy; the first probe (check_all_now) corrects that.
    BackendPool(std::vector<BackendUrl> backends, RoutingPolicy policy, HealthCheckOptions health);
    ~BackendPool();  // stops the health checks

    // One probe of every backend, on this thread (at start, so that the log
    // and the first request see the true state).
    void check_all_now();
    void start_health_checks();
    void stop_health_checks();

    // Routes a request whose prompt has these block keys to a healthy
    // backend it has not tried yet (tried[i]) and counts it outstanding
    // there. Deciding and counting under one lock is the point: two
    // requests arriving together must not both see the same idle backend.
    RouteDecision acquire(const std::vector<uint64_t>& block_keys, const std::vector<bool>& tried);
    // The forward acquire() started is over: answered, failed or cancelled.
    void release(int backend);
    // Out at once, until a health probe passes again.
    void mark_down(int backend, const std::string& why);

    int size() const { return int(backends_.size()); }
    const BackendUrl& url(int backend) const { return backends_[size_t(backend)]; }
    std::vector<int> healthy_backends() const;
    bool is_healthy(int backend) const;
    std::vector<BackendStats> stats() const;
    int64_t total_outstanding() const;
    const RoutingPolicy& policy() const { return policy_; }  // its options; not its table

  private:
    void set_health(int backend, bool healthy, const std::string& why);
    bool probe(int backend, std::string& why) const;
    void health_loop();

    const std::vector<BackendUrl> backends_;
    const HealthCheckOptions health_;

    mutable std::mutex mutex_;  // guards everything below
    RoutingPolicy policy_;
    std::vector<bool> healthy_;
    std::vector<int64_t> outstanding_;
    std::vector<int64_t> requests_total_;

    std::condition_variable stop_signal_;
    bool stopping_ = false;
    std::thread health_thread_;
};

}  // namespace servelab
