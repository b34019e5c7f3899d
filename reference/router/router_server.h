// router_server.h — `servelab route`: an OpenAI-compatible front that
// forwards each request to one of several `servelab serve` replicas.
//
// Part of the distributed layer (chapter 11.7, "routing"). Routes:
//   POST /v1/completions, /v1/chat/completions   forwarded to the replica the
//        policy picks (routing_policy.h), keyed by the prompt's leading text
//        (prompt_key.h); server-sent events are relayed as they arrive
//   GET  /v1/models   the union of the healthy replicas' models, by id
//   GET  /health      200 while any replica is healthy, else 503
//   GET  /metrics     Prometheus text: per-replica requests, outstanding and
//                     health; retries; cache-aware decisions
// The body is parsed only for its routing text; every other check is the
// replica's, whose answer (a 400, a 404 for an unknown model) is relayed.
//
// No request that had not started is lost: a forward that fails before a
// byte of its answer reached the client (no connection, a reset, the
// replica died, or it answered 503 because it is draining or full) is
// retried on another healthy replica, each replica at most once. A whole
// (non-stream) answer is relayed only once complete, so it is retryable
// until its last byte; a stream is committed at its first chunk, and a
// failure after that ends it with an OpenAI-style error event. With no
// replica left: 503 and an OpenAI-style error body.
// stop() is the graceful shutdown (SIGTERM): new requests get 503, the
// forwards in flight run to their end (at most drain_timeout), then the
// listener closes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "reference/router/backend_pool.h"
#include "reference/router/upstream_call.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace servelab {

struct RouterOptions {
    std::string host = "127.0.0.1";
    int port = 8080;      // 0: any free port (tests)
    std::string api_key;  // empty: no authentication at the router
    int64_t max_body_bytes = 1 << 20;
    int max_connections = 256;        // client connections served at once
    int64_t prefix_block_chars = 64;  // routing-text block (prompt_key.h)
    UpstreamTimeouts upstream;
    std::chrono::milliseconds drain_timeout{30000};  // SIGTERM → forwards cut
};

class RouterServer {
  public:
    // `pool` must outlive the server.
    RouterServer(BackendPool& pool, RouterOptions options);
    ~RouterServer();
    // Binds the listening socket; returns the port. Throws servelab::Error
    // when it cannot.
    int bind();
    // Serves until stop(); call after bind().
    void run();
    // Graceful: refuse new requests, let the forwards in flight end, close.
    void stop();

  private:
    void add_routes();
    void handle_generation(const httplib::Request& request, httplib::Response& response, bool chat);
    // Relays `call`, which has started and will be answered, to `response`:
    // whole, or as a stream when the replica answers with server-sent events.
    // False (nothing sent) when a whole answer failed before its end.
    bool relay(std::shared_ptr<UpstreamCall> call, httplib::Response& response, int backend);
    void handle_models(const httplib::Request& request, httplib::Response& response);
    std::string render_metrics() const;

    BackendPool& pool_;
    RouterOptions options_;
    std::unique_ptr<httplib::Server> http_;
    std::atomic<bool> draining_{false};      // stop() called: new requests get 503
    std::atomic<bool> cut_forwards_{false};  // the drain timed out: forwards cancelled
    std::atomic<int64_t> retries_total_{0};
    std::atomic<int64_t> affinity_hits_total_{0};
    std::atomic<int64_t> load_overrides_total_{0};
    std::atomic<int64_t> no_match_total_{0};
    std::atomic<int64_t> stream_failures_total_{0};  // streams ended by an error event
};

}  // namespace servelab
