// router_server.cpp — see router_server.h.
#include "reference/router/router_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include <set>
#include <thread>

#include "reference/common/error.h"
#include "reference/router/prompt_key.h"
#include "reference/server/openai_protocol.h"
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

// The rest of an answer that is relayed whole (check call.failed() after);
// cancels the call if the drain runs out meanwhile.
std::string read_to_end(UpstreamCall& call, const std::atomic<bool>& cut_forwards) {
    std::string body;
    for (std::string chunk;;) {
        if (cut_forwards) call.cancel();
        const UpstreamCall::Pop popped = call.pop(chunk, kStreamPoll);
        if (popped == UpstreamCall::Pop::kEnd) return body;
        if (popped == UpstreamCall::Pop::kChunk) body += chunk;
    }
}

}  // namespace

RouterServer::RouterServer(BackendPool& pool, RouterOptions options)
    : pool_(pool), options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
    // One thread per client connection; each forward adds its own (upstream_call.h).
    const size_t threads = size_t(options_.max_connections);
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http_->set_payload_max_length(size_t(options_.max_body_bytes));
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which
    // a second router on a taken port would start and split its traffic.
    http_->set_socket_options([](socket_t sock) {
        const int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
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
    http_->listen_after_bind();
}

void RouterServer::stop() {
    draining_ = true;
    const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
    while (pool_.total_outstanding() > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    cut_forwards_ = true;  // whatever still runs ends now (streams with an error event)
    http_->stop();
}

void RouterServer::add_routes() {
    http_->set_pre_routing_handler([this](const HttpRequest& request, HttpResponse& response) {
        const bool api = request.path.rfind("/v1/", 0) == 0;
        if (api && draining_) {
            send_error(response,
                       {503, "server_error", "the router is shutting down", "", "shutting_down"});
            return httplib::Server::HandlerResponse::Handled;
        }
        if (api && !options_.api_key.empty() &&
            request.get_header_value("Authorization") != "Bearer " + options_.api_key) {
            send_error(response, {401, "invalid_request_error",
                                  "missing or wrong API key (Authorization: Bearer <key>)", "",
                                  "invalid_api_key"});
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
    http_->Post("/v1/completions", [this](const HttpRequest& request, HttpResponse& response) {
        handle_generation(request, response, false);
    });
    http_->Post("/v1/chat/completions", [this](const HttpRequest& request, HttpResponse& response) {
        handle_generation(request, response, true);
    });
    http_->Get("/v1/models", [this](const HttpRequest& request, HttpResponse& response) {
        handle_models(request, response);
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

void RouterServer::handle_generation(const HttpRequest& request, HttpResponse& response,
                                     bool chat) {
    const nlohmann::json body = nlohmann::json::parse(request.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
        send_error(response, {400, "invalid_request_error",
                              "the request body must be a JSON object", "", ""});
        return;
    }
    const std::vector<uint64_t> keys =
        prefix_block_keys(routing_text(body, chat), options_.prefix_block_chars);
    std::vector<bool> tried(size_t(pool_.size()), false);
    std::string refusal;  // the last replica's 503 body, if one refused
    for (int attempt = 0; attempt < pool_.size() && !cut_forwards_; ++attempt) {
        const RouteDecision decision = pool_.acquire(keys, tried);
        if (decision.backend < 0) break;
        const int backend = decision.backend;
        tried[size_t(backend)] = true;
        if (attempt > 0) ++retries_total_;
        if (decision.reason == RouteReason::kAffinityHit) ++affinity_hits_total_;
        if (decision.reason == RouteReason::kLoadOverride) ++load_overrides_total_;
        if (decision.reason == RouteReason::kNoMatch) ++no_match_total_;
        auto call = std::make_shared<UpstreamCall>(pool_.url(backend), request.path, request.body,
                                                   forwarded_headers(request), options_.upstream,
                                                   [this, backend] { pool_.release(backend); });
        call->wait_for_start();
        if (call->failed()) {
            pool_.mark_down(backend,
                            "a forward failed before its answer (" + call->failure() + ")");
            continue;
        }
        if (call->status() == 503) {  // draining or full: someone else may have room
            refusal = read_to_end(*call, cut_forwards_);
            spdlog::debug("backend {} refused a request (503); trying another",
                          pool_.url(backend).text());
            continue;
        }
        if (relay(call, response, backend)) return;
        pool_.mark_down(backend, "a forward failed before its end (" + call->failure() + ")");
    }
    if (!refusal.empty()) {
        response.status = 503;
        response.set_content(refusal, "application/json");
        return;
    }
    send_error(response, no_backend_error());
}

bool RouterServer::relay(std::shared_ptr<UpstreamCall> call, HttpResponse& response, int backend) {
    const int status = call->status();
    const std::string content_type = call->content_type();
    if (status == 200 && content_type.rfind("text/event-stream", 0) == 0) {
        // Committed: from here on a failure is the client's. Events are
        // passed on whole (up to the last "\n\n" received), so that an error
        // event after a failure never lands inside a half-sent one.
        auto pending = std::make_shared<std::string>();
        response.status = 200;
        response.set_header("Cache-Control", "no-cache");
        response.set_chunked_content_provider(
            "text/event-stream",
            [this, call, pending, backend](size_t, httplib::DataSink& sink) {
                if (cut_forwards_) call->cancel();
                std::string chunk;
                const UpstreamCall::Pop popped = call->pop(chunk, kStreamPoll);
                if (popped == UpstreamCall::Pop::kNothingYet) return true;
                if (popped == UpstreamCall::Pop::kChunk) {
                    pending->append(chunk);
                    const size_t end = pending->rfind("\n\n");
                    if (end == std::string::npos) return true;
                    const bool written = sink.write(pending->data(), end + 2);
                    pending->erase(0, end + 2);
                    return written;  // false: the client left; the releaser cancels
                }
                if (call->failed()) {
                    ++stream_failures_total_;
                    if (!cut_forwards_) {
                        pool_.mark_down(backend, "a stream failed (" + call->failure() + ")");
                    }
                    const std::string event =
                        "data: " +
                        error_body({502, "server_error",
                                    "the backend failed mid-stream (" + call->failure() + ")", "",
                                    "backend_failed"})
                            .dump() +
                        "\n\n";
                    sink.write(event.data(), event.size());
                } else if (!pending->empty()) {
                    sink.write(pending->data(), pending->size());
                }
                sink.done();
                return true;
            },
            [call](bool) { call->cancel(); });
        return true;
    }
    const std::string body = read_to_end(*call, cut_forwards_);
    if (call->failed()) return false;
    response.status = status;
    response.set_content(body, content_type.empty() ? "application/json" : content_type);
    return true;
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
           "streams ended by an error event (their backend failed after the first chunk)",
           stream_failures_total_);
    single("counter", "servelab_router_affinity_hits_total",
           "cache-aware: requests sent to the backend that last took their prefix",
           affinity_hits_total_);
    single("counter", "servelab_router_load_bound_overrides_total",
           "cache-aware: requests whose affine backend was too busy (sent to the least loaded)",
           load_overrides_total_);
    single("counter", "servelab_router_no_match_total",
           "cache-aware: requests with no known prefix block (sent to the least loaded)",
           no_match_total_);
    return families.render();
}

}  // namespace servelab
