// http_server.cpp — see http_server.h.
#include "reference/server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "reference/server/api_listener.h"
#include "reference/server/http_listener.h"
#include "reference/server/request_admission.h"
#include "reference/server/request_body.h"
#include "reference/server/sse_stream.h"
#include "reference/server/tokenize_route.h"
#include "reference/server/tool_call_response.h"

namespace servelab {
namespace {

using Milliseconds = std::chrono::milliseconds;
using httplib::ContentReader;
using HttpRequest = httplib::Request;
using HttpResponse = httplib::Response;

int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

ApiError overloaded(const std::string& message) {
    return {503, "server_error", message, "", "overloaded"};
}

nlohmann::json model_object(const std::string& name) {
    return {
        {"id", name}, {"object", "model"}, {"created", unix_seconds()}, {"owned_by", "servelab"}};
}

// The routes an API key guards: all but /health and /metrics.
bool needs_api_key(const std::string& path) {
    return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

// Counts a handler as in flight for the graceful shutdown.
class InFlight {
  public:
    explicit InFlight(std::atomic<int64_t>& count) : count_(count) { ++count_; }
    ~InFlight() { --count_; }

  private:
    std::atomic<int64_t>& count_;
};

// Each choice's figures (a cancelled one has none), then the request's one
// outcome. Cut short by the drain timeout, it is answered with
// finish_reason "cancelled" and counted cancelled.
void record_whole_outcome(ServerMetrics& metrics, const std::vector<GenerationResult>& results) {
    bool cut_short = false;
    for (const GenerationResult& result : results) {
        if (result.finish_reason == FinishReason::kCancelled) {
            cut_short = true;
        } else {
            metrics.record(result);
        }
    }
    if (cut_short) {
        metrics.record_request_cancelled();
    } else {
        metrics.record_request_success();
    }
}

}  // namespace

OpenAiServer::OpenAiServer(const std::vector<ServedModel>& models, ServerOptions options)
    : options_(std::move(options)) {
    if (models.empty()) throw Error("serve: no model to serve");
    for (const ServedModel& served : models) {
        for (const auto& other : models_) {
            if (other->name == served.name) {
                throw Error(
                    fmt::format("serve: two models are named '{}' (give each its own "
                                "--served-model-name)",
                                served.name));
            }
        }
        models_.push_back(std::make_unique<ModelRoute>(served, options_.requests));
    }

    ListenerLimits listener;
    listener.max_connections = options_.max_connections;
    listener.header_timeout = options_.header_timeout;
    listener.body_timeout = options_.body_timeout;
    http_ = make_api_listener(listener, options_.max_body_bytes, http_metrics_);
    add_routes();
}

OpenAiServer::~OpenAiServer() = default;

void OpenAiServer::add_routes() {
    add_api_key_check();
    add_info_routes();
    add_generation_routes();
    add_tokenizer_routes();
    add_fallback_routes();  // last: their ".*" matches every path
}

void OpenAiServer::add_api_key_check() {
    http_->set_pre_routing_handler([this](const HttpRequest& request, HttpResponse& response) {
        if (options_.api_key.empty() || !needs_api_key(request.path)) {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        if (request.get_header_value("Authorization") != "Bearer " + options_.api_key) {
            send_error(response, {401, "invalid_request_error",
                                  "missing or wrong API key (Authorization: Bearer <key>)", "",
                                  "invalid_api_key"});
            close_after(request, response);  // its body was not read
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
}

void OpenAiServer::add_info_routes() {
    http_->Get("/health", [this](const HttpRequest&, HttpResponse& response) {
        response.status = draining_ ? 503 : 200;
        response.set_content(draining_ ? R"({"status":"draining"})" : R"({"status":"ok"})",
                             "application/json");
    });
    http_->Get("/v1/models", [this](const HttpRequest&, HttpResponse& response) {
        nlohmann::json data = nlohmann::json::array();
        for (const auto& route : models_) data.push_back(model_object(route->name));
        response.set_content(response_text({{"object", "list"}, {"data", data}}),
                             "application/json");
    });
    http_->Get(R"(/v1/models/(.+))", [this](const HttpRequest& request, HttpResponse& response) {
        handle_model(request.matches[1].str(), response);
    });
    http_->Get("/metrics", [this](const HttpRequest&, HttpResponse& response) {
        MetricFamilies families;
        for (const auto& route : models_) {
            route->metrics.collect(route->loop.stats(), model_label(route->name), families);
        }
        http_metrics_.collect(families);
        response.set_content(families.render(), "text/plain; version=0.0.4");
    });
}

void OpenAiServer::add_generation_routes() {
    using WithReader = httplib::Server::HandlerWithContentReader;
    http_->Post("/v1/completions",
                WithReader([this](const HttpRequest& request, HttpResponse& response,
                                  const ContentReader& reader) {
                    handle_generation(request, response, reader, false);
                }));
    http_->Post("/v1/chat/completions",
                WithReader([this](const HttpRequest& request, HttpResponse& response,
                                  const ContentReader& reader) {
                    handle_generation(request, response, reader, true);
                }));
}

void OpenAiServer::add_tokenizer_routes() {
    using WithReader = httplib::Server::HandlerWithContentReader;
    http_->Post("/tokenize", WithReader([this](const HttpRequest& request, HttpResponse& response,
                                               const ContentReader& reader) {
                    handle_tokenizer(request, response, reader, /*detokenize=*/false);
                }));
    http_->Post("/detokenize", WithReader([this](const HttpRequest& request, HttpResponse& response,
                                                 const ContentReader& reader) {
                    handle_tokenizer(request, response, reader, /*detokenize=*/true);
                }));
}

void OpenAiServer::handle_tokenizer(const httplib::Request& request, httplib::Response& response,
                                    const httplib::ContentReader& content_reader, bool detokenize) {
    InFlight in_flight(in_flight_);
    std::string body;
    if (!read_body(request, response, content_reader, body)) return;
    nlohmann::json answer;
    const std::optional<ApiError> refusal = detokenize ? detokenize_answer(body, models_, answer)
                                                       : tokenize_answer(body, models_, answer);
    if (refusal) {
        send_error(response, *refusal);
        return;
    }
    response.set_content(response_text(answer), "application/json");
}

void OpenAiServer::handle_model(const std::string& id, httplib::Response& response) {
    std::vector<std::string> names;
    for (const auto& route : models_) {
        if (route->name == id) {
            response.set_content(response_text(model_object(id)), "application/json");
            return;
        }
        names.push_back(route->name);
    }
    send_error(response, unknown_model_error(id, names));
}

void OpenAiServer::add_fallback_routes() {
    // Every other route that may carry a body is answered without reading
    // it: left to the library, a chunked body would be read whole into
    // memory before the 404, whatever its size.
    const httplib::Server::HandlerWithContentReader no_such_route =
        [this](const HttpRequest& request, HttpResponse& response, const ContentReader&) {
            send_error(response, {404, "invalid_request_error", "no such route", "", ""});
            close_after(request, response);
        };
    http_->Post(".*", no_such_route);
    http_->Put(".*", no_such_route);
    http_->Patch(".*", no_such_route);
    http_->Delete(".*", no_such_route);
    // Anything httplib answers on its own (unknown route, 400 unparsable
    // HTTP) still gets an OpenAI-style body.
    http_->set_error_handler([this](const HttpRequest&, HttpResponse& response) {
        if (!response.body.empty()) return;
        const std::string message =
            response.status == 404 ? "no such route" : fmt::format("HTTP {}", response.status);
        send_error(response, {response.status,
                              response.status >= 500 ? "server_error" : "invalid_request_error",
                              message, "", ""});
    });
}

int OpenAiServer::bind() {
    const int port = options_.port == 0
                         ? http_->bind_to_any_port(options_.host)
                         : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port < 0) {
        throw Error(
            fmt::format("serve: cannot listen on {}:{} (in use, or not an address of "
                        "this machine)",
                        options_.host, options_.port));
    }
    return port;
}

void OpenAiServer::run() {
    http_->serve();
}

void OpenAiServer::stop() {
    draining_ = true;
    http_->begin_drain();
    // Then whatever still runs is cancelled.
    for (const auto& route : models_) route->loop.stop(options_.drain_timeout);
    // Let the handlers write their last bytes before the listener closes.
    // Bounded: every choice ends by the drain timeout, and every write has a deadline.
    while (in_flight_ > 0) std::this_thread::sleep_for(Milliseconds(10));
    http_->stop();
}

void OpenAiServer::send_error(httplib::Response& response, const ApiError& error,
                              ModelRoute* route) {
    http_metrics_.record_http_error(error.status);
    if (error.status == 503) {
        if (route != nullptr) {
            route->metrics.record_request_rejected();
        } else {
            http_metrics_.record_request_rejected();
        }
    }
    response.status = error.status;
    response.set_content(response_text(error_body(error)), "application/json");
}

void OpenAiServer::close_after(const httplib::Request& request, httplib::Response& response) {
    http_->close_after_response(request);
    response.set_header("Connection", "close");
}

bool OpenAiServer::read_body(const httplib::Request& request, httplib::Response& response,
                             const httplib::ContentReader& content_reader, std::string& body) {
    const std::optional<ApiError> refusal =
        read_request_body(request, content_reader, options_.max_body_bytes,
                          options_.body_timeout.count() / 1000.0, body);
    if (!refusal) return true;
    send_error(response, *refusal);
    close_after(request, response);
    return false;
}

bool OpenAiServer::wait_for_results(const httplib::Request& request,
                                    std::vector<std::shared_ptr<RequestStream>>& streams,
                                    std::vector<GenerationResult>& results, std::string& error) {
    // With no write to fail, the only way to notice a client that left is
    // to look, every 100 ms whether tokens are arriving or not.
    const auto check_every = Milliseconds(100);
    auto next_check = std::chrono::steady_clock::now() + check_every;
    for (auto& stream : streams) {
        StreamEvent event;
        while (true) {
            if (stream->next(event, check_every) && event.kind == StreamEvent::Kind::kEnd) break;
            if (std::chrono::steady_clock::now() < next_check) continue;
            next_check = std::chrono::steady_clock::now() + check_every;
            if (!http_->client_connected(request)) {
                for (auto& other : streams) other->cancel();
                return false;
            }
        }
        if (!event.result) {
            for (auto& other : streams) other->cancel();
            error = event.error;
            return true;
        }
        results.push_back(std::move(*event.result));
    }
    return true;
}

void OpenAiServer::handle_generation(const httplib::Request& http_request,
                                     httplib::Response& response,
                                     const httplib::ContentReader& content_reader, bool chat) {
    InFlight in_flight(in_flight_);
    if (draining_) {
        send_error(response, overloaded("the server is shutting down"));
        close_after(http_request, response);
        return;
    }
    std::string body;
    if (!read_body(http_request, response, content_reader, body)) return;
    Admission admission;
    if (const std::optional<ApiError> refusal =
            admit_request(body, chat, models_, seeds_, admission)) {
        send_error(response, *refusal);
        return;
    }
    ModelRoute& route = *admission.route;
    const ApiRequest& request = admission.request;
    const int64_t prompt_tokens = int64_t(admission.engine_request.prompt.size());
    std::vector<std::shared_ptr<RequestStream>> streams;
    if (!submit(route, admission.engine_request, response, streams)) return;
    const ResponseHeader header{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++),
                                unix_seconds(), request.model, chat};
    if (!request.stream) {
        reply_whole(http_request, response, route, header, streams, prompt_tokens,
                    request.return_token_ids, admission.engine_request.tools);
        return;
    }
    SseStream::attach(std::make_shared<SseStream>(std::move(streams), header, prompt_tokens,
                                                  request.include_usage, route, http_metrics_,
                                                  in_flight_, admission.engine_request.tools),
                      response);
}

bool OpenAiServer::submit(ModelRoute& route, EngineRequest& engine_request,
                          httplib::Response& response,
                          std::vector<std::shared_ptr<RequestStream>>& streams) {
    try {
        streams = route.loop.submit_group(std::move(engine_request.prompt), engine_request.params,
                                          engine_request.num_completions, engine_request.priority);
    } catch (const QueueFull& e) {
        send_error(response, overloaded(e.what()), &route);
        return false;
    }
    return true;
}

void OpenAiServer::reply_whole(const httplib::Request& http_request, httplib::Response& response,
                               ModelRoute& route, const ResponseHeader& header,
                               std::vector<std::shared_ptr<RequestStream>>& streams,
                               int64_t prompt_tokens, bool with_token_ids,
                               const ToolRequest& tools) {
    std::vector<GenerationResult> results;
    std::string error;
    if (!wait_for_results(http_request, streams, results, error)) {
        route.metrics.record_request_cancelled();  // no one is left to answer
        close_after(http_request, response);
        return;
    }
    if (!error.empty()) {
        send_error(response, {400, "invalid_request_error", error, "", ""});
        return;
    }
    record_whole_outcome(route.metrics, results);
    nlohmann::json body =
        completion_response(header, results, prompt_tokens, route.tokenizer, with_token_ids);
    add_tool_calls(body, results, tools, route.tokenizer);  // when the answers called tools
    response.set_content(response_text(body), "application/json");
}

}  // namespace servelab
