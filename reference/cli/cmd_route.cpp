// cmd_route.cpp — `servelab route`: an OpenAI-compatible router in front of
// `servelab serve` replicas (chapter 11.7, "routing").
//
// Checks the backend URLs, probes each backend's /health once, then serves
// (reference/router/router_server.h) while a background thread keeps
// probing. Binds 127.0.0.1:8080 by default. SIGTERM, SIGINT (Ctrl-C) or
// SIGHUP (the terminal closed) shuts down gracefully: new requests get 503,
// the forwards in flight end (cut after --drain-timeout), then the process
// exits 0. A second signal exits at once.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/error.h"
#include "reference/cli/commands.h"
#include "reference/cli/shutdown_signals.h"
#include "reference/common/memory_release.h"
#include "reference/router/backend_pool.h"
#include "reference/router/router_server.h"
#include "reference/router/routing_policy.h"

namespace servelab::cli {
namespace {

struct RouteOptions {
    std::vector<std::string> backends;
    std::string policy = "cache-aware";
    RouterOptions router;
    CacheAwareOptions cache_aware;
    double health_interval_s = 1;
    double health_timeout_s = 1;
    double connect_timeout_s = 2;
    double request_timeout_s = 600;
    double drain_timeout_s = 30;
    double header_timeout_s = 5;
    double body_timeout_s = 30;
    double first_byte_timeout_s = 300;
    double idle_timeout_s = 30;
};

std::chrono::milliseconds ms(double seconds) {
    return std::chrono::milliseconds(int64_t(seconds * 1000.0));
}

// The --backend URLs, parsed; a URL given twice is refused.
std::vector<BackendUrl> parse_backends(const RouteOptions& opts) {
    std::vector<BackendUrl> backends;
    for (const std::string& url : opts.backends) {
        const BackendUrl parsed = parse_backend_url(url);
        for (const BackendUrl& earlier : backends) {
            if (earlier.text() == parsed.text())
                throw Error("backend '" + url + "' is given twice");
        }
        backends.push_back(parsed);
    }
    return backends;
}

// The router's options with the seconds above resolved.
RouterOptions resolved_router(const RouteOptions& opts) {
    RouterOptions router_options = opts.router;
    router_options.upstream = {.connect = ms(opts.connect_timeout_s),
                               .read = ms(opts.request_timeout_s)};
    router_options.drain_timeout = ms(opts.drain_timeout_s);
    router_options.header_timeout = ms(opts.header_timeout_s);
    router_options.body_timeout = ms(opts.body_timeout_s);
    router_options.first_byte_timeout = ms(opts.first_byte_timeout_s);
    router_options.idle_timeout = ms(opts.idle_timeout_s);
    return router_options;
}

// Each backend's first health check, then where the router listens and how it routes.
void log_routing(const RouteOptions& opts, BackendPool& pool, RoutingPolicyKind kind,
                 const RouterOptions& router_options, int port) {
    const std::vector<int> healthy = pool.healthy_backends();
    for (int backend = 0; backend < pool.size(); ++backend) {
        const bool up = std::find(healthy.begin(), healthy.end(), backend) != healthy.end();
        spdlog::info("backend {}: {}", pool.url(backend).text(), up ? "healthy" : "not answering");
    }
    if (kind == RoutingPolicyKind::kCacheAware) {
        spdlog::info(
            "routing on http://{}:{} over {} backends, policy cache-aware (prefix blocks of {} "
            "chars, {} keys at most; affinity yields when the backend has > {} and > {}x the "
            "least loaded's outstanding requests)",
            router_options.host, port, pool.size(), router_options.prefix_block_chars,
            opts.cache_aware.max_table_entries, opts.cache_aware.balance_abs_threshold,
            opts.cache_aware.balance_rel_threshold);
    } else {
        spdlog::info("routing on http://{}:{} over {} backends, policy {}", router_options.host,
                     port, pool.size(), routing_policy_name(kind));
    }
    if (healthy.empty()) spdlog::warn("no backend is healthy yet: requests get 503 until one is");
}

void run_route(const RouteOptions& opts) {
    limit_retained_memory();                      // before any thread starts: memory_release.h
    sigset_t signals = block_shutdown_signals();  // before any thread, too
    const std::vector<BackendUrl> backends = parse_backends(opts);
    const RoutingPolicyKind kind = parse_routing_policy(opts.policy);
    BackendPool pool(
        backends, RoutingPolicy(kind, opts.cache_aware),
        {.interval = ms(opts.health_interval_s), .timeout = ms(opts.health_timeout_s)});
    const RouterOptions router_options = resolved_router(opts);
    RouterServer router(pool, router_options);
    const int port = router.bind();
    pool.check_all_now();
    log_routing(opts, pool, kind, router_options, port);
    pool.start_health_checks();
    std::atomic<bool> stopped_without_signal{false};
    std::thread drainer;  // started by the first signal
    std::thread signal_waiter([&] {
        int signal = 0;
        sigwait(&signals, &signal);
        if (stopped_without_signal) return;
        spdlog::info(
            "signal {}: draining (new requests get 503), then exiting; a second "
            "signal exits at once",
            signal);
        // The drain runs on its own thread, so that this one can take a second signal.
        drainer = std::thread([&] { router.stop(); });
        sigwait(&signals, &signal);
        if (stopped_without_signal) return;
        spdlog::warn("signal {} again: exiting now, without draining", signal);
        std::_Exit(128 + signal);
    });
    router.run();  // returns once stopped
    if (drainer.joinable()) drainer.join();
    // Wake the waiter, which is still waiting for a first signal (the
    // listener failed) or a second one (the drain is done).
    stopped_without_signal = true;
    pthread_kill(signal_waiter.native_handle(), SIGTERM);
    signal_waiter.join();
    pool.stop_health_checks();
    spdlog::info("stopped");
}

// Health probes and the cache-aware policy's prefix table and balance thresholds.
void add_route_policy_flags(CLI::App& cmd, RouteOptions& opts) {
    cmd.add_option("--health-interval", opts.health_interval_s,
                   "seconds between two /health probes of a replica")
        ->check(CLI::Range(0.01, 3600.0))
        ->capture_default_str();
    cmd.add_option("--health-timeout", opts.health_timeout_s,
                   "seconds a probe may take (connect, then answer) before the replica is out")
        ->check(CLI::Range(0.01, 60.0))
        ->capture_default_str();
    cmd.add_option("--prefix-block-chars", opts.router.prefix_block_chars,
                   "cache-aware: characters per block of the prompt text routed on")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
        ->capture_default_str();
    cmd.add_option("--prefix-table-entries", opts.cache_aware.max_table_entries,
                   "cache-aware: prefix blocks remembered (least recently used forgotten)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 30))
        ->capture_default_str();
    cmd.add_option("--balance-abs-threshold", opts.cache_aware.balance_abs_threshold,
                   "cache-aware: affinity yields to the least loaded replica when the affine "
                   "one has more than this many outstanding requests above it...")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 20))
        ->capture_default_str();
    cmd.add_option("--balance-rel-threshold", opts.cache_aware.balance_rel_threshold,
                   "...and more than this many times its count")
        ->check(CLI::Range(1.0, 1e6))
        ->capture_default_str();
}

// How long a replica may take to connect, to begin and to continue an answer.
void add_route_upstream_flags(CLI::App& cmd, RouteOptions& opts) {
    cmd.add_option("--connect-timeout", opts.connect_timeout_s,
                   "seconds to connect to a replica (else the next one is tried)")
        ->check(CLI::Range(0.01, 60.0))
        ->capture_default_str();
    cmd.add_option("--request-timeout", opts.request_timeout_s,
                   "seconds a replica may stay silent during a request before it fails")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    cmd.add_option("--first-byte-timeout", opts.first_byte_timeout_s,
                   "seconds a replica may take to begin its answer before the request is "
                   "retried on another (a whole answer begins when its last token is done)")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    cmd.add_option("--idle-timeout", opts.idle_timeout_s,
                   "seconds a started answer may stay silent before it is cut (a stream "
                   "ends with an error event)")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    cmd.add_option("--max-response-bytes", opts.router.max_response_bytes,
                   "largest whole (non-stream) answer the router holds; larger: 502")
        ->check(CLI::Range(int64_t(1024), int64_t(1) << 32))
        ->capture_default_str();
}

// What clients may send and how long they may take; how long a drain lasts.
void add_route_client_flags(CLI::App& cmd, RouteOptions& opts) {
    cmd.add_option("--max-body-bytes", opts.router.max_body_bytes,
                   "largest request body (larger: 413)")
        ->check(CLI::Range(int64_t(1024), int64_t(1) << 30))
        ->capture_default_str();
    cmd.add_option("--max-connections", opts.router.max_connections,
                   "client connections served at once (streams included)")
        ->check(CLI::Range(1, 768))
        ->capture_default_str();
    cmd.add_option("--header-timeout", opts.header_timeout_s,
                   "seconds a connection has to send its whole request head (else 408)")
        ->check(CLI::Range(0.1, 600.0))
        ->capture_default_str();
    cmd.add_option("--body-timeout", opts.body_timeout_s,
                   "seconds a request has to send its whole body (else 400)")
        ->check(CLI::Range(0.1, 3600.0))
        ->capture_default_str();
    cmd.add_option("--drain-timeout", opts.drain_timeout_s,
                   "on SIGTERM or SIGHUP, seconds the forwards in flight may run before they "
                   "are cut")
        ->check(CLI::Range(0.0, 86400.0))
        ->capture_default_str();
}

}  // namespace

void add_route(CLI::App& app) {
    auto opts = std::make_shared<RouteOptions>();
    CLI::App* cmd = app.add_subcommand(
        "route", "OpenAI-compatible router in front of `servelab serve` replicas");
    cmd->add_option("--backend", opts->backends,
                    "a replica, http://HOST:PORT (repeat the option for each)")
        ->required();
    cmd->add_option("--policy", opts->policy,
                    "which replica takes a request: 'round-robin', 'least-outstanding' "
                    "(fewest requests in flight) or 'cache-aware' (the replica that last took "
                    "the prompt's leading text, unless it is too busy)")
        ->check(CLI::IsMember({"round-robin", "least-outstanding", "cache-aware"}))
        ->capture_default_str();
    cmd->add_option("--host", opts->router.host, "address to bind")->capture_default_str();
    cmd->add_option("--port", opts->router.port, "port (0: any free port)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    cmd->add_option("--api-key", opts->router.api_key,
                    "require 'Authorization: Bearer KEY' on /v1/* (the header is passed on "
                    "to the replicas either way)");
    add_route_policy_flags(*cmd, *opts);
    add_route_upstream_flags(*cmd, *opts);
    add_route_client_flags(*cmd, *opts);
    cmd->callback([opts] { run_route(*opts); });
}

}  // namespace servelab::cli
