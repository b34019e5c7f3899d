// router_server.cpp — see router_server.h.
#include "reference/router/router_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <set>
#include <thread>

#include "kernels/common/error.h"
#include "reference/router/prompt_key.h"
#include "reference/router/sse_event_buffer.h"
#include "reference/server/api_listener.h"
#include "reference/server/http_listener.h"
#include "reference/server/openai_protocol.h"
#include "reference/server/request_body.h"
#include "reference/server/request_json.h"
#include "reference/server/server_metrics.h"

namespace servelab {
namespace {

using HttpRequest = httplib::Request;
using HttpResponse = httplib::Response;

// How often a waiting stream looks up from its queue: to notice a client
// that left, or the end of the drain.
constexpr std::chrono::milliseconds kStreamPoll{200};

void send_error(HttpResponse& response, const ApiError& error) {
    response.status = error.status;
    response.set_content(error_body(error).dump(), "application/json");
}

ApiError no_backend_error() {
    return {503, "server_error", "no healthy backend can take the request", "",
            "no_healthy_backend"};
}

// The Authorization header is the replica's business too: passed through.
httplib::Headers forwarded_headers(const HttpRequest& request) {
    httplib::Headers headers;
    if (request.has_header("Authorization")) {
        headers.emplace("Authorization", request.get_header_value("Authorization"));
    }
    return headers;
}

// A replica's 503 body, relayed if no other replica takes the request. It
// comes from our own replica, but a replica can hang or misbehave: the read
// stops after `idle_timeout` of silence, past `max_bytes`, or when the drain
// runs out (the call cancelled each time), and a body that did not arrive
// whole as JSON gives way to the router's own 503 body.
std::string read_refusal(UpstreamCall& call, const std::atomic<bool>& cut_forwards,
                         int64_t max_bytes, std::chrono::milliseconds idle_timeout) {
    std::string body;
    auto last_chunk = std::chrono::steady_clock::now();
    for (std::string chunk;;) {
        if (cut_forwards || int64_t(body.size()) > max_bytes) call.cancel();
        const UpstreamCall::Pop popped = call.pop(chunk, kStreamPoll);
        if (popped == UpstreamCall::Pop::kEnd) break;
        if (popped == UpstreamCall::Pop::kChunk) {
            last_chunk = std::chrono::steady_clock::now();
            body += chunk;
        } else if (std::chrono::steady_clock::now() - last_chunk > idle_timeout) {
            call.cancel();
        }
    }
    if (call.failed() || int64_t(body.size()) > max_bytes || !nlohmann::json::accept(body)) {
        return error_body({503, "server_error",
                           "every backend that was tried is full or shutting "
                           "down",
                           "", "overloaded"})
            .dump();
    }
    return body;
}

// The error event that ends a stream the router cannot finish.
std::string stream_error_event(const std::string& message) {
    return "data: " + error_body({502, "server_error", message, "", "backend_failed"}).dump() +
           "\n\n";
}

}  // namespace

RouterServer::RouterServer(BackendPool& pool, RouterOptions options)
    : pool_(pool), options_(std::move(options)) {
    ListenerLimits listener;
    listener.max_connections = options_.max_connections;
    listener.header_timeout = options_.header_timeout;
    listener.body_timeout = options_.body_timeout;
    http_ = make_api_listener(listener, options_.max_body_bytes, http_metrics_);
    // Every answer that went through a handler, the router's own errors and
    // the replicas' relayed ones alike, is counted as it is written; the
    // listener's refusals above never reach a handler.
    http_->set_logger([this](const HttpRequest& request, const HttpResponse& response) {
        http_metrics_.record_error_answer(response.status, request.method, request.path);
    });
    add_routes();
}

RouterServer::~RouterServer() = default;

int RouterServer::bind() {
    int port = options_.port;
    if (port == 0) {
        port = http_->bind_to_any_port(options_.host);
    } else if (!http_->bind_to_port(options_.host, port)) {
        port = -1;
    }
    if (port <= 0) {
        throw Error(fmt::format("route: cannot listen on {}:{}", options_.host, options_.port));
    }
    return port;
}

void RouterServer::run() {
    http_->serve();
}

void RouterServer::stop() {
    draining_ = true;
    http_->begin_drain();
    const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
    while (pool_.total_outstanding() > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    cut_forwards_ = true;  // whatever still runs ends now (streams with an error event)
    http_->stop();
}

void RouterServer::close_after(const HttpRequest& request, HttpResponse& response) {
    http_->close_after_response(request);
    response.set_header("Connection", "close");
}

void RouterServer::add_routes() {
    // Both refusals come before the body is read: the connection closes after them.
    http_->set_pre_routing_handler([this](const HttpRequest& request, HttpResponse& response) {
        const bool api = request.path.rfind("/v1/", 0) == 0 || request.path == "/tokenize" ||
                         request.path == "/detokenize";
        if (api && draining_) {
            send_error(response,
                       {503, "server_error", "the router is shutting down", "", "shutting_down"});
            close_after(request, response);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (api && !options_.api_key.empty() &&
            request.get_header_value("Authorization") != "Bearer " + options_.api_key) {
            send_error(response, {401, "invalid_request_error",
                                  "missing or wrong API key (Authorization: Bearer <key>)", "",
                                  "invalid_api_key"});
            close_after(request, response);
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    // cpp-httplib answers an unknown route (404) or an oversized body (413)
    // with an empty body; clients expect an OpenAI-style one.
    http_->set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const HttpRequest& request, HttpResponse& response) {
            if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            std::string message = fmt::format("HTTP {}", response.status);
            if (response.status == 404) {
                message = fmt::format("no route {} {}", request.method, request.path);
            } else if (response.status == 413) {
                message = fmt::format("the request body is over {} bytes", options_.max_body_bytes);
            }
            send_error(response, {response.status,
                                  response.status >= 500 ? "server_error" : "invalid_request_error",
                                  message, "", ""});
            return httplib::Server::HandlerResponse::Handled;
        }));
    using WithReader = httplib::Server::HandlerWithContentReader;
    for (const auto& [path, route_kind] : {std::pair{"/v1/completions", Forwarded::kCompletion},
                                           std::pair{"/v1/chat/completions", Forwarded::kChat},
                                           std::pair{"/tokenize", Forwarded::kTokenizer},
                                           std::pair{"/detokenize", Forwarded::kTokenizer}}) {
        const Forwarded kind = route_kind;  // clang 14 cannot capture a structured binding
        http_->Post(path,
                    WithReader([this, kind](const HttpRequest& request, HttpResponse& response,
                                            const httplib::ContentReader& reader) {
                        handle_forward(request, response, reader, kind);
                    }));
    }
    // Every other route that may carry a body is answered without reading
    // it: left to the library, a chunked body would be read whole first.
    const WithReader no_such_route = [this](const HttpRequest& request, HttpResponse& response,
                                            const httplib::ContentReader&) {
        send_error(response, {404, "invalid_request_error",
                              fmt::format("no route {} {}", request.method, request.path), "", ""});
        close_after(request, response);
    };
    http_->Post(".*", no_such_route);
    http_->Put(".*", no_such_route);
    http_->Patch(".*", no_such_route);
    http_->Delete(".*", no_such_route);
    http_->Get("/v1/models", [this](const HttpRequest& request, HttpResponse& response) {
        handle_models(request, response);
    });
    http_->Get(R"(/v1/models/(.+))", [this](const HttpRequest& request, HttpResponse& response) {
        handle_model(request, response);
    });
    http_->Get("/health", [this](const HttpRequest&, HttpResponse& response) {
        const int healthy = int(pool_.healthy_backends().size());
        const char* status = draining_ ? "draining" : (healthy > 0 ? "ok" : "no_healthy_backend");
        response.status = !draining_ && healthy > 0 ? 200 : 503;
        response.set_content(
            nlohmann::json{
                {"status", status}, {"healthy_backends", healthy}, {"backends", pool_.size()}}
                .dump(),
            "application/json");
    });
    http_->Get("/metrics", [this](const HttpRequest&, HttpResponse& response) {
        response.set_content(render_metrics(), "text/plain; version=0.0.4");
    });
}

void RouterServer::handle_forward(const HttpRequest& request, HttpResponse& response,
                                  const httplib::ContentReader& content_reader, Forwarded kind) {
    std::string text;
    if (const std::optional<ApiError> refusal =
            read_request_body(request, content_reader, options_.max_body_bytes,
                              options_.body_timeout.count() / 1000.0, text)) {
        send_error(response, *refusal);
        close_after(request, response);
        return;
    }
    nlohmann::json body;
    try {
        body = parse_request_json(text);
    } catch (const ApiException& e) {
        send_error(response, e.error());
        return;
    }
    if (!body.is_object()) {
        send_error(response, {400, "invalid_request_error",
                              "the request body must be a JSON object", "", ""});
        return;
    }
    const bool generation = kind != Forwarded::kTokenizer;
    const std::vector<uint64_t> keys =
        generation ? prefix_block_keys(routing_text(body, kind == Forwarded::kChat),
                                       options_.prefix_block_chars)
                   : std::vector<uint64_t>{};
    std::vector<bool> tried(size_t(pool_.size()), false);
    std::string refusal;  // the last replica's 503 body, if one refused
    for (int attempt = 0; attempt < pool_.size() && !cut_forwards_; ++attempt) {
        const RouteDecision decision = pool_.acquire(keys, tried);
        if (decision.backend < 0) break;
        const int backend = decision.backend;
        tried[size_t(backend)] = true;
        if (attempt > 0) ++retries_total_;
        if (generation && decision.reason == RouteReason::kAffinityHit) ++affinity_hits_total_;
        if (generation && decision.reason == RouteReason::kLoadOverride) ++load_overrides_total_;
        if (generation && decision.reason == RouteReason::kNoMatch) ++no_match_total_;
        auto call = std::make_shared<UpstreamCall>(pool_.url(backend), request.path, text,
                                                   forwarded_headers(request), options_.upstream,
                                                   [this, backend] { pool_.release(backend); });
        std::string why;
        const Relayed started = await_start(request, *call, backend, why);
        if (started == Relayed::kClientLeft) return;
        if (started == Relayed::kFailedBeforeAnswer) {
            pool_.mark_down(backend, "a forward failed before its answer (" + why + ")");
            continue;
        }
        if (call->status() == 503) {  // draining or full: someone else may have room
            refusal = read_refusal(*call, cut_forwards_, options_.max_response_bytes,
                                   options_.idle_timeout);
            spdlog::debug("backend {} refused a request (503); trying another",
                          pool_.url(backend).text());
            continue;
        }
        const Relayed relayed = relay(request, call, response, backend);
        if (relayed != Relayed::kFailedBeforeAnswer) return;
        pool_.mark_down(backend, "a forward failed before its end (" + call->failure() + ")");
    }
    if (!refusal.empty()) {
        response.status = 503;
        response.set_content(refusal, "application/json");
        return;
    }
    send_error(response, no_backend_error());
}

RouterServer::Relayed RouterServer::await_start(const HttpRequest& request, UpstreamCall& call,
                                                int backend, std::string& why) {
    const auto deadline = std::chrono::steady_clock::now() + options_.first_byte_timeout;
    while (!call.wait_for_start(kStreamPoll)) {
        // A whole answer's first byte comes when its last token is done: a
        // client that leaves before then must cancel it on the replica.
        if (!http_->client_connected(request)) {
            call.cancel();
            ++client_cancels_total_;
            return Relayed::kClientLeft;
        }
        // A replica the health checks took out (hung: SIGSTOP, a dead host)
        // will not answer in time; nothing has reached the client, so the
        // request goes elsewhere now rather than after the client gives up.
        if (!pool_.is_healthy(backend)) {
            why = "the replica failed its health check while the request waited";
        } else if (std::chrono::steady_clock::now() > deadline) {
            why = fmt::format("no answer in {} s (--first-byte-timeout)",
                              options_.first_byte_timeout.count() / 1000.0);
        } else if (cut_forwards_) {
            why = "the drain ran out";
        } else {
            continue;
        }
        call.cancel();
        return Relayed::kFailedBeforeAnswer;
    }
    if (call.failed()) {
        why = call.failure();
        return Relayed::kFailedBeforeAnswer;
    }
    return Relayed::kAnswered;
}

RouterServer::Relayed RouterServer::relay(const HttpRequest& request,
                                          std::shared_ptr<UpstreamCall> call,
                                          HttpResponse& response, int backend) {
    if (call->status() == 200 && call->content_type().rfind("text/event-stream", 0) == 0) {
        relay_stream(call, response, backend);
        return Relayed::kAnswered;
    }
    return relay_whole(request, *call, response);
}

void RouterServer::relay_stream(std::shared_ptr<UpstreamCall> call, HttpResponse& response,
                                int backend) {
    // Committed: from here on a failure is the client's, told by an error
    // event. Events go out whole (sse_event_buffer.h), so that the error
    // event never lands inside a half-sent one.
    struct StreamState {
        explicit StreamState(size_t max_event_bytes) : events(max_event_bytes) {}
        SseEventBuffer events;
        std::chrono::steady_clock::time_point last_chunk = std::chrono::steady_clock::now();
    };
    auto state = std::make_shared<StreamState>(size_t(options_.max_event_bytes));
    response.status = 200;
    response.set_header("Cache-Control", "no-cache");
    response.set_chunked_content_provider(
        "text/event-stream",
        [this, call, state, backend](size_t, httplib::DataSink& sink) {
            if (cut_forwards_) call->cancel();
            std::string chunk;
            std::string failure;
            const UpstreamCall::Pop popped = call->pop(chunk, kStreamPoll);
            const auto now = std::chrono::steady_clock::now();
            if (popped == UpstreamCall::Pop::kChunk) {
                state->last_chunk = now;
                std::string whole;
                if (state->events.append(chunk, whole)) {
                    return whole.empty() || sink.write(whole.data(), whole.size());
                }
                failure = fmt::format("an event over {} bytes", options_.max_event_bytes);
            } else if (popped == UpstreamCall::Pop::kNothingYet) {
                if (now - state->last_chunk < options_.idle_timeout) return true;
                failure = fmt::format("no event for {} s", options_.idle_timeout.count() / 1000.0);
            } else if (call->failed()) {
                failure = "the backend failed mid-stream (" + call->failure() + ")";
            } else if (state->events.partial_bytes() > 0 || !state->events.ended_with_done()) {
                failure = "the backend's stream ended without [DONE]";
            }
            if (!failure.empty()) {
                call->cancel();
                ++stream_failures_total_;
                if (!cut_forwards_) pool_.mark_down(backend, "a stream failed: " + failure);
                const std::string event = stream_error_event(failure);
                sink.write(event.data(), event.size());
            }
            sink.done();
            return true;
        },
        [call](bool) { call->cancel(); });
}

RouterServer::Relayed RouterServer::relay_whole(const HttpRequest& request, UpstreamCall& call,
                                                HttpResponse& response) {
    std::string body;
    auto last_chunk = std::chrono::steady_clock::now();
    for (std::string chunk;;) {
        if (cut_forwards_) call.cancel();
        // Nobody writes to a client that waits for a whole answer, so look:
        // one that left must cancel its request on the replica too.
        if (!http_->client_connected(request)) {
            call.cancel();
            ++client_cancels_total_;
            return Relayed::kClientLeft;
        }
        const UpstreamCall::Pop popped = call.pop(chunk, kStreamPoll);
        if (popped == UpstreamCall::Pop::kEnd) break;
        if (popped == UpstreamCall::Pop::kChunk) {
            last_chunk = std::chrono::steady_clock::now();
            body += chunk;
        } else if (std::chrono::steady_clock::now() - last_chunk > options_.idle_timeout) {
            call.cancel();
        }
        if (int64_t(body.size()) > options_.max_response_bytes) {
            call.cancel();
            send_error(response, {502, "server_error",
                                  fmt::format("the backend's answer is over {} bytes",
                                              options_.max_response_bytes),
                                  "", "backend_failed"});
            return Relayed::kAnswered;
        }
    }
    if (call.failed()) return Relayed::kFailedBeforeAnswer;
    const std::string content_type = call.content_type();
    if (call.status() == 200 && !nlohmann::json::accept(body)) {
        send_error(response,
                   {502, "server_error", "the backend answered 200 with a body that is not JSON",
                    "", "backend_failed"});
        return Relayed::kAnswered;
    }
    response.status = call.status();
    response.set_content(body, content_type.empty() ? "application/json" : content_type);
    return Relayed::kAnswered;
}

void RouterServer::handle_models(const HttpRequest& request, HttpResponse& response) {
    nlohmann::json models = nlohmann::json::array();
    std::set<std::string> seen;
    bool answered = false;
    std::shared_ptr<httplib::Response>
        refusal;  // a replica's non-200 answer, relayed if none said 200
    for (const int backend : pool_.healthy_backends()) {
        httplib::Client client(pool_.url(backend).host, pool_.url(backend).port);
        client.set_connection_timeout(options_.upstream.connect);
        client.set_read_timeout(options_.upstream.connect);
        httplib::Result result = client.Get("/v1/models", forwarded_headers(request));
        if (!result) continue;
        if (result->status != 200) {
            refusal = std::make_shared<httplib::Response>(result.value());
            continue;
        }
        const nlohmann::json list = nlohmann::json::parse(result->body, nullptr, false);
        if (list.is_discarded() || !list.is_object() || !list.contains("data") ||
            !list["data"].is_array()) {
            continue;
        }
        answered = true;
        for (const nlohmann::json& model : list["data"]) {
            if (!model.is_object() || !model.contains("id") || !model["id"].is_string()) continue;
            if (seen.insert(model["id"].get<std::string>()).second) models.push_back(model);
        }
    }
    if (answered) {
        response.set_content(nlohmann::json{{"object", "list"}, {"data", models}}.dump(),
                             "application/json");
    } else if (refusal) {
        response.status = refusal->status;
        response.set_content(refusal->body, "application/json");
    } else {
        send_error(response, no_backend_error());
    }
}

void RouterServer::handle_model(const HttpRequest& request, HttpResponse& response) {
    // Any healthy replica that serves the model answers for it; a 404 (or
    // another refusal) is relayed only when none does.
    std::optional<httplib::Response> refusal;
    for (const int backend : pool_.healthy_backends()) {
        httplib::Client client(pool_.url(backend).host, pool_.url(backend).port);
        client.set_connection_timeout(options_.upstream.connect);
        client.set_read_timeout(options_.upstream.connect);
        httplib::Result result = client.Get(request.path, forwarded_headers(request));
        if (!result) continue;
        if (result->status == 200 && nlohmann::json::accept(result->body)) {
            response.set_content(result->body, "application/json");
            return;
        }
        if (result->status != 200) refusal = result.value();
    }
    if (refusal) {
        response.status = refusal->status;
        response.set_content(refusal->body, "application/json");
    } else {
        send_error(response, no_backend_error());
    }
}

std::string RouterServer::render_metrics() const {
    const std::vector<BackendStats> backends = pool_.stats();
    // The server's families (server_metrics.h); a backend URL is
    // http://host:port (backend_pool.h checks it), nothing a label must escape.
    MetricFamilies families;
    const auto per_backend = [&](const char* type, const std::string& name, const std::string& help,
                                 auto value_of) {
        for (const BackendStats& backend : backends) {
            families.add(type, name, help, "backend=\"" + backend.url + "\"",
                         double(value_of(backend)));
        }
    };
    const auto single = [&](const char* type, const std::string& name, const std::string& help,
                            int64_t value) { families.add(type, name, help, "", double(value)); };
    per_backend("counter", "servelab_router_requests_total",
                "forwards sent to the backend, retries included",
                [](const BackendStats& b) { return b.requests_total; });
    per_backend("gauge", "servelab_router_outstanding_requests",
                "forwards to the backend not yet answered in full",
                [](const BackendStats& b) { return b.outstanding; });
    per_backend("gauge", "servelab_router_backend_healthy",
                "1 while the backend takes requests, 0 while it is out",
                [](const BackendStats& b) { return b.healthy ? 1 : 0; });
    single("counter", "servelab_router_retries_total",
           "forwards retried on another backend (the earlier one failed or refused before "
           "answering)",
           retries_total_);
    single("counter", "servelab_router_stream_failures_total",
           "streams ended by an error event (after the first chunk their backend failed, went "
           "silent, sent an event over the cap, or ended without [DONE])",
           stream_failures_total_);
    single("counter", "servelab_router_client_cancels_total",
           "whole answers whose client left while they were generated (cancelled on the "
           "backend)",
           client_cancels_total_);
    single("counter", "servelab_router_affinity_hits_total",
           "cache-aware: requests sent to the backend that last took their prefix",
           affinity_hits_total_);
    single("counter", "servelab_router_load_bound_overrides_total",
           "cache-aware: requests whose affine backend was too busy (sent to the least loaded)",
           load_overrides_total_);
    single("counter", "servelab_router_no_match_total",
           "cache-aware: requests with no known prefix block (sent to the least loaded)",
           no_match_total_);
    http_metrics_.collect(families);
    return families.render();
}

}  // namespace servelab
