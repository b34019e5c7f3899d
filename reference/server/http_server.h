// http_server.h — the OpenAI-compatible HTTP front of the engine loop.
//
// Part of the serving layer (chapter 11.7). One server may serve several
// models (`serve --model a --model b`), each with its own engine loop and KV
// pool: a request's "model" field picks one (404 naming the served models
// otherwise), /v1/models lists them all, and /metrics labels each model's
// samples with model="name". Routes:
//   POST /v1/completions, /v1/chat/completions   whole JSON, or server-sent
//        events ("data: {chunk}\n\n" … "data: [DONE]\n\n") with "stream": true
//   POST /tokenize, /detokenize   vLLM's: the prompt a body becomes, and back
//        (tokenize_route.h)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text)
// Each generation request is admitted (request_admission.h: parsed,
// routed, built by the one front door into one parallel request of n
// choices, the prompt computed once, choice i seeded seed + i), submitted
// to its model's loop (admitted there together or not at all), then
// answered whole or streamed (sse_stream.h). Errors are
// OpenAI-style bodies with a 4xx or 5xx status (openai_protocol.h). A client
// that disconnects, streaming or not, has its requests cancelled. With an
// API key, /v1/*, /tokenize and /detokenize require "Authorization: Bearer
// <key>". A request without a seed gets a fresh one (FreshSeeds). Connections,
// deadlines and pipelining are the listener's (http_listener.h); bodies
// are read here, never past --max-body-bytes, chunked or not.
// stop() is the graceful shutdown (SIGTERM): new requests get 503, admitted
// ones run to their end and are answered (cancelled and answered once the
// drain timeout passes), then the listener closes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "reference/chat/chat_format.h"
#include "reference/engine/request_builder.h"
#include "reference/model/model.h"
#include "reference/server/engine_loop.h"
#include "reference/server/model_route.h"
#include "reference/server/openai_protocol.h"
#include "reference/server/openai_responses.h"
#include "reference/server/request_admission.h"
#include "reference/server/server_metrics.h"

namespace httplib {
struct Request;
struct Response;
class ContentReader;
}  // namespace httplib

namespace servelab {

class HttpListener;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;      // 0: any free port (tests)
    std::string api_key;  // empty: no authentication
    int64_t max_body_bytes = 1 << 20;
    int max_connections = 512;                       // requests served at once
    std::chrono::milliseconds header_timeout{5000};  // connect → whole request head
    std::chrono::milliseconds body_timeout{30000};   // head → whole body
    std::chrono::milliseconds drain_timeout{30000};  // SIGTERM → running requests cancelled
    RequestBuilderOptions requests;  // special tokens in messages, speculative decoding
};

class OpenAiServer {
  public:
    // Every model and loop must outlive the server; names must differ.
    OpenAiServer(const std::vector<ServedModel>& models, ServerOptions options);
    ~OpenAiServer();
    // Binds the listening socket; returns the port. Throws servelab::Error
    // when it cannot (port in use, bad host).
    int bind();
    // Serves until stop(); call after bind().
    void run();
    // Graceful: refuse new requests, finish admitted ones, close.
    void stop();

  private:
    // The routes, in the order the library matches them.
    void add_routes();
    void add_api_key_check();      // /v1/*, /tokenize, /detokenize: 401 without the key
    void add_info_routes();        // GET /health, /v1/models, /v1/models/{id}, /metrics
    void add_generation_routes();  // POST /v1/completions, /v1/chat/completions
    void add_tokenizer_routes();   // POST /tokenize, /detokenize
    void add_fallback_routes();    // 404 for the rest, and bodies for the library's own errors
    // POST /v1/completions (chat false) and /v1/chat/completions: the drain
    // check, the body, admission, submission, then the answer whole or streamed.
    void handle_generation(const httplib::Request& request, httplib::Response& response,
                           const httplib::ContentReader& content_reader, bool chat);
    // POST /tokenize, or /detokenize: the body, then its answer (tokenize_route.h).
    void handle_tokenizer(const httplib::Request& request, httplib::Response& response,
                          const httplib::ContentReader& content_reader, bool detokenize);
    // GET /v1/models/{id}: the model object, or 404 (model_not_found).
    void handle_model(const std::string& id, httplib::Response& response);
    // Reads the body into `body`, never more than max_body_bytes of it
    // (Content-Length or chunked); false after answering 413 or 400.
    bool read_body(const httplib::Request& request, httplib::Response& response,
                   const httplib::ContentReader& content_reader, std::string& body);
    // Queues the request's choices in its model's loop, into `streams` (one
    // per choice); false after answering 503 when the queue has no room.
    bool submit(ModelRoute& route, EngineRequest& engine_request, httplib::Response& response,
                std::vector<std::shared_ptr<RequestStream>>& streams);
    // The non-streamed answer: waits for every choice, then one JSON body
    // (choices that called `tools` answered as calls).
    // Nothing is answered when the client left (the choices are cancelled).
    void reply_whole(const httplib::Request& request, httplib::Response& response,
                     ModelRoute& route, const ResponseHeader& header,
                     std::vector<std::shared_ptr<RequestStream>>& streams, int64_t prompt_tokens,
                     bool with_token_ids, const ToolRequest& tools);
    // For an answer sent before the body was read (or after reading stopped
    // partway): the connection closes after it, since what follows in the
    // stream is not a request.
    void close_after(const httplib::Request& request, httplib::Response& response);
    // Waits for every choice's end, cancelling them all if the client leaves;
    // false when it left (nothing is answered then).
    bool wait_for_results(const httplib::Request& request,
                          std::vector<std::shared_ptr<RequestStream>>& streams,
                          std::vector<GenerationResult>& results, std::string& error);
    // A 503 counts as a rejected request of `route`'s model, or of none.
    void send_error(httplib::Response& response, const ApiError& error,
                    ModelRoute* route = nullptr);

    ServerOptions options_;
    std::vector<std::unique_ptr<ModelRoute>> models_;
    HttpMetrics http_metrics_;
    std::unique_ptr<HttpListener> http_;
    std::atomic<bool> draining_{false};
    std::atomic<int64_t> in_flight_{0};
    std::atomic<int64_t> next_id_{0};
    FreshSeeds seeds_;  // for the requests that give no seed
};

}  // namespace servelab
