// router_server.h — `servelab route`: an OpenAI-compatible front that
// forwards each request to one of several `servelab serve` replicas.
//
// Part of the distributed layer (chapter 11.7, "routing"). Routes:
//   POST /v1/completions, /v1/chat/completions   forwarded to the replica the
//        policy picks (routing_policy.h), keyed by the prompt's leading text
//        (prompt_key.h); server-sent events are relayed as they arrive
//   POST /tokenize, /detokenize   forwarded to a replica the policy picks
//        (no routing key: they compute no prompt, so they teach the
//        cache-aware table nothing), answered by it whole
//   GET  /v1/models   the union of the healthy replicas' models, by id
//   GET  /v1/models/{id}   the first healthy replica's model object for it,
//        or a replica's 404 when none serves it
//   GET  /health      200 while any replica is healthy, else 503
//   GET  /metrics     Prometheus text: per-replica requests, outstanding and
//                     health; retries; cache-aware decisions; the 4xx and 5xx
//                     it answered, its listener's refusals included, as the
//                     server counts them
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
// A forward waiting for its first byte is given up (and retried) when its
// replica fails a health probe or first_byte_timeout passes; a started
// answer silent for idle_timeout is cut. A stream that ends without
// "[DONE]", or mid-event, ends with the error event, not as a normal end;
// a whole answer over max_response_bytes, or a 200 that is not JSON, is a
// 502. A client that leaves cancels its forward, whole or streamed.
// stop() is the graceful shutdown (SIGTERM): new requests get 503, the
// forwards in flight run to their end (at most drain_timeout), then the
// listener closes.
// Clients are served through the server's own listener (http_listener.h):
// a poll thread waits for request heads, so a slow client costs a poll
// entry, not a thread, and meets the same deadlines (408), head limit
// (431), capacity answer (503) and framing rules (400); bodies are read
// within --max-body-bytes whatever their encoding (request_body.h) and
// parsed within depth and size bounds (request_json.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "reference/router/backend_pool.h"
#include "reference/router/upstream_call.h"
#include "reference/server/server_metrics.h"

namespace httplib {
class ContentReader;
struct Request;
struct Response;
}  // namespace httplib

namespace servelab {

class HttpListener;

struct RouterOptions {
    std::string host = "127.0.0.1";
    int port = 8080;      // 0: any free port (tests)
    std::string api_key;  // empty: no authentication at the router
    int64_t max_body_bytes = 1 << 20;
    int max_connections = 256;                       // client requests served at once
    std::chrono::milliseconds header_timeout{5000};  // connect → whole request head
    std::chrono::milliseconds body_timeout{30000};   // head → whole body
    int64_t prefix_block_chars = 64;                 // routing-text block (prompt_key.h)
    UpstreamTimeouts upstream;
    std::chrono::milliseconds drain_timeout{30000};  // SIGTERM → forwards cut
    // A replica that has not begun its answer this long is given up on and
    // the request retried elsewhere (nothing has reached the client). Long:
    // a whole (non-stream) answer begins only when its last token is done.
    std::chrono::milliseconds first_byte_timeout{300000};
    // A started answer silent this long is cut (a stream with an error event).
    std::chrono::milliseconds idle_timeout{30000};
    int64_t max_event_bytes = 16 << 20;     // one server-sent event, relayed
    int64_t max_response_bytes = 64 << 20;  // a whole answer, held until complete
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
    // What a POST forwards: a generation request (routed by its prompt's
    // text) or a tokenizer request (not routed by anything).
    enum class Forwarded { kCompletion, kChat, kTokenizer };
    void handle_forward(const httplib::Request& request, httplib::Response& response,
                        const httplib::ContentReader& content_reader, Forwarded kind);
    // For an answer sent before the body was read whole: the connection
    // closes after it, since what follows in the stream is not a request.
    void close_after(const httplib::Request& request, httplib::Response& response);
    enum class Relayed { kAnswered, kFailedBeforeAnswer, kClientLeft };
    // Waits for `call` to start: kAnswered once it has; kFailedBeforeAnswer
    // (the call cancelled, `why` set) when its replica went out, stayed
    // silent past first_byte_timeout, or the drain ran out, when nothing has
    // reached the client yet; kClientLeft (the call cancelled) when the
    // client is gone.
    Relayed await_start(const httplib::Request& request, UpstreamCall& call, int backend,
                        std::string& why);
    // Relays `call`, which has started, to `response`: as a stream when the
    // replica answers with server-sent events, else whole.
    Relayed relay(const httplib::Request& request, std::shared_ptr<UpstreamCall> call,
                  httplib::Response& response, int backend);
    void relay_stream(std::shared_ptr<UpstreamCall> call, httplib::Response& response, int backend);
    Relayed relay_whole(const httplib::Request& request, UpstreamCall& call,
                        httplib::Response& response);
    void handle_models(const httplib::Request& request, httplib::Response& response);
    // GET /v1/models/{id}, asked of the healthy replicas in turn.
    void handle_model(const httplib::Request& request, httplib::Response& response);
    std::string render_metrics() const;

    BackendPool& pool_;
    RouterOptions options_;
    std::unique_ptr<HttpListener> http_;
    std::atomic<bool> draining_{false};      // stop() called: new requests get 503
    std::atomic<bool> cut_forwards_{false};  // the drain timed out: forwards cancelled
    std::atomic<int64_t> retries_total_{0};
    std::atomic<int64_t> affinity_hits_total_{0};
    std::atomic<int64_t> load_overrides_total_{0};
    std::atomic<int64_t> no_match_total_{0};
    std::atomic<int64_t> stream_failures_total_{0};  // streams ended by an error event
    std::atomic<int64_t> client_cancels_total_{0};   // whole answers whose client left
    HttpMetrics http_metrics_;  // 4xx and 5xx answered, 503s to generation requests
};

}  // namespace servelab
