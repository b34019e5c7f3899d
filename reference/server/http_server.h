// http_server.h — the OpenAI-compatible HTTP front of the engine loop.
//
// Part of the serving layer (issue 10, chapter 11.7). Routes:
//   POST /v1/completions, /v1/chat/completions   whole JSON, or server-sent
//        events ("data: {chunk}\n\n" … "data: [DONE]\n\n") with "stream": true
//   GET  /v1/models, /health, /metrics (Prometheus text)
// Each HTTP request becomes n requests of the one EngineLoop (completion i
// seeded seed + i). Errors are OpenAI-style bodies with a 4xx or 5xx status
// (openai_protocol.h); a streaming client that disconnects has its requests
// cancelled. With an API key, /v1/* require "Authorization: Bearer <key>".
// stop() is the graceful shutdown (SIGTERM): new requests get 503, admitted
// ones run to their end and are answered, then the listener closes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "reference/model/model.h"
#include "reference/server/engine_loop.h"
#include "reference/server/openai_protocol.h"
#include "reference/server/server_metrics.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace servelab {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;      // 0: any free port (tests)
    std::string api_key;  // empty: no authentication
    std::string model_name;
    int64_t max_body_bytes = 1 << 20;
    int num_http_threads = 64;  // concurrent connections served
};

class OpenAiServer {
  public:
    // `model` and `loop` must outlive the server.
    OpenAiServer(const Model& model, EngineLoop& loop, ServerOptions options);
    ~OpenAiServer();
    // Binds the listening socket; returns the port. Throws servelab::Error
    // when it cannot (port in use, bad host).
    int bind();
    // Serves until stop(); call after bind().
    void run();
    // Graceful: refuse new requests, finish admitted ones, close.
    void stop();

  private:
    void handle_generation(const httplib::Request& request, httplib::Response& response, bool chat);
    void send_error(httplib::Response& response, const ApiError& error);
    std::vector<TokenId> prompt_of(const ApiRequest& request) const;

    const Model& model_;
    EngineLoop& loop_;
    ServerOptions options_;
    ProtocolLimits limits_;
    ServerMetrics metrics_;
    std::unique_ptr<httplib::Server> http_;
    std::atomic<bool> draining_{false};
    std::atomic<int64_t> in_flight_{0};
    std::atomic<int64_t> next_id_{0};
};

}  // namespace servelab
