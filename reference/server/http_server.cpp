// http_server.cpp — see http_server.h.
#include "reference/server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <thread>

#include "reference/server/api_listener.h"
#include "reference/server/http_listener.h"
#include "reference/server/openai_responses.h"
#include "reference/server/request_body.h"
#include "reference/server/request_json.h"

namespace servelab {
namespace {

using Milliseconds = std::chrono::milliseconds;

int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Model output can hold invalid UTF-8 (a random model, a cut-off byte
// sequence); JSON must not, so such bytes become U+FFFD instead of an error.
std::string to_text(const nlohmann::json& body) {
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse(const nlohmann::json& chunk) {
    return "data: " + to_text(chunk) + "\n\n";
}

ApiError overloaded(const std::string& message) {
    return {503, "server_error", message, "", "overloaded"};
}

// Counts a handler as in flight for the graceful shutdown.
class InFlight {
  public:
    explicit InFlight(std::atomic<int64_t>& count) : count_(count) { ++count_; }
    ~InFlight() { --count_; }

  private:
    std::atomic<int64_t>& count_;
};

bool any_cancelled(const std::vector<GenerationResult>& results) {
    for (const GenerationResult& result : results) {
        if (result.finish_reason == FinishReason::kCancelled) return true;
    }
    return false;
}

// The one front door's view of an API request (request_builder.h).
RequestSpec spec_of(const ApiRequest& request) {
    RequestSpec spec;
    if (request.chat) {
        spec.kind = RequestSpec::PromptKind::kChat;
        spec.messages = request.messages;
    } else if (!request.prompt_ids.empty()) {
        spec.kind = RequestSpec::PromptKind::kTokenIds;
        spec.token_ids = request.prompt_ids;
    } else {
        spec.kind = RequestSpec::PromptKind::kText;
        spec.text = request.prompt_text;
    }
    spec.params = request.params;
    spec.max_tokens_given = request.max_tokens_given;
    spec.num_completions = request.n;
    return spec;
}

}  // namespace

OpenAiServer::ModelRoute::ModelRoute(const ServedModel& served,
                                     const RequestBuilderOptions& requests)
    : name(served.name),
      loop(*served.loop),
      tokenizer(served.model->tokenizer),
      builder(*served.model, requests) {
    limits.model_name = served.name;
    limits.context_length = builder.context_length();
    limits.vocab_size = served.model->config.vocab_size;
}

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
    using httplib::ContentReader;
    using httplib::Request;
    using httplib::Response;
    http_->set_pre_routing_handler([this](const Request& request, Response& response) {
        if (options_.api_key.empty() || request.path.rfind("/v1/", 0) != 0) {
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
    http_->Get("/health", [this](const Request&, Response& response) {
        response.status = draining_ ? 503 : 200;
        response.set_content(draining_ ? R"({"status":"draining"})" : R"({"status":"ok"})",
                             "application/json");
    });
    http_->Get("/v1/models", [this](const Request&, Response& response) {
        nlohmann::json data = nlohmann::json::array();
        for (const auto& route : models_) {
            data.push_back({{"id", route->name},
                            {"object", "model"},
                            {"created", unix_seconds()},
                            {"owned_by", "servelab"}});
        }
        response.set_content(to_text({{"object", "list"}, {"data", data}}), "application/json");
    });
    http_->Get("/metrics", [this](const Request&, Response& response) {
        MetricFamilies families;
        for (const auto& route : models_) {
            route->metrics.collect(route->loop.stats(), model_label(route->name), families);
        }
        http_metrics_.collect(families);
        response.set_content(families.render(), "text/plain; version=0.0.4");
    });
    using WithReader = httplib::Server::HandlerWithContentReader;
    http_->Post("/v1/completions", WithReader([this](const Request& request, Response& response,
                                                     const ContentReader& reader) {
                    handle_generation(request, response, reader, false);
                }));
    http_->Post(
        "/v1/chat/completions",
        WithReader([this](const Request& request, Response& response, const ContentReader& reader) {
            handle_generation(request, response, reader, true);
        }));
    // Every other route that may carry a body is answered without reading
    // it: left to the library, a chunked body would be read whole into
    // memory before the 404, whatever its size.
    const WithReader no_such_route = [this](const Request& request, Response& response,
                                            const ContentReader&) {
        send_error(response, {404, "invalid_request_error", "no such route", "", ""});
        close_after(request, response);
    };
    http_->Post(".*", no_such_route);
    http_->Put(".*", no_such_route);
    http_->Patch(".*", no_such_route);
    http_->Delete(".*", no_such_route);
    // Anything httplib answers on its own (unknown route, 400 unparsable
    // HTTP) still gets an OpenAI-style body.
    http_->set_error_handler([this](const Request&, Response& response) {
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

OpenAiServer::ModelRoute& OpenAiServer::route_for(const std::string& model_name) {
    for (const auto& route : models_) {
        if (route->name == model_name) return *route;
    }
    throw Error("no route for model " + model_name);  // requested_model() checked the name
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
    response.set_content(to_text(error_body(error)), "application/json");
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
    std::string text;
    if (!read_body(http_request, response, content_reader, text)) return;
    nlohmann::json body;
    try {
        body = parse_request_json(text);
    } catch (const ApiException& e) {
        send_error(response, e.error());
        return;
    }
    ModelRoute* route = nullptr;
    ApiRequest request;
    EngineRequest engine_request;
    try {
        std::vector<std::string> names;
        for (const auto& served : models_) names.push_back(served->name);
        route = &route_for(requested_model(body, names));
        request = parse_api_request(body, chat, route->limits);
        engine_request = route->builder.build(spec_of(request));
    } catch (const ApiException& e) {
        send_error(response, e.error());
        return;
    } catch (const RequestError& e) {
        send_error(response, {400, "invalid_request_error", e.what(), e.param(), e.code()});
        return;
    }
    // n choices are admitted together; more than the queue holds could
    // never be, however idle the server.
    EngineLoop& loop = route->loop;
    if (request.n > loop.max_waiting()) {
        send_error(response, {400, "invalid_request_error",
                              fmt::format("n = {} choices can never be admitted together: the "
                                          "server queues at most {} (--max-waiting)",
                                          request.n, loop.max_waiting()),
                              "n", ""});
        return;
    }
    const int64_t prompt_tokens = int64_t(engine_request.prompt.size());
    std::vector<std::shared_ptr<RequestStream>> streams;
    try {
        streams = loop.submit_group(std::move(engine_request.prompt), engine_request.params,
                                    engine_request.num_completions);
    } catch (const QueueFull& e) {
        send_error(response, overloaded(e.what()), route);
        return;
    }
    const ResponseHeader header{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++),
                                unix_seconds(), request.model, chat};

    if (!request.stream) {
        std::vector<GenerationResult> results;
        std::string error;
        if (!wait_for_results(http_request, streams, results, error)) {
            route->metrics.record_request_cancelled();  // no one is left to answer
            close_after(http_request, response);
            return;
        }
        if (!error.empty()) {
            send_error(response, {400, "invalid_request_error", error, "", ""});
            return;
        }
        for (const GenerationResult& result : results) {
            if (result.finish_reason != FinishReason::kCancelled) route->metrics.record(result);
        }
        // Cut short by the drain timeout: answered, with finish_reason "cancelled".
        if (any_cancelled(results)) {
            route->metrics.record_request_cancelled();
        } else {
            route->metrics.record_request_success();
        }
        response.set_content(
            to_text(completion_response(header, results, prompt_tokens, route->tokenizer,
                                        request.return_token_ids)),
            "application/json");
        return;
    }

    // Streaming: the provider runs on this connection's thread until every
    // choice has ended (or the client is gone).
    struct Streamed {
        std::vector<std::shared_ptr<RequestStream>> streams;
        bool outcome_recorded = false;
    };
    auto state = std::make_shared<Streamed>();
    state->streams = std::move(streams);
    const bool include_usage = request.include_usage;
    ++in_flight_;  // released when the provider is done (it outlives this handler)
    response.set_chunked_content_provider(
        "text/event-stream",
        [this, route, state, header, prompt_tokens, include_usage](size_t,
                                                                   httplib::DataSink& sink) {
            ServerMetrics& metrics = route->metrics;
            const Tokenizer& tokenizer = route->tokenizer;
            std::vector<std::shared_ptr<RequestStream>>& streams = state->streams;
            std::vector<bool> first(streams.size(), true);
            std::vector<bool> ended(streams.size(), false);
            std::vector<int64_t> text_bytes(streams.size(),
                                            0);  // logprobs' text_offset, per choice
            int64_t completion_tokens = 0;
            size_t num_ended = 0;
            bool cut_short = false;  // a choice ended "cancelled" (the drain timed out)
            bool failed = false;     // the engine refused a choice
            const auto write = [&sink](const std::string& text) {
                return sink.is_writable() && sink.write(text.data(), text.size());
            };
            while (num_ended < streams.size()) {
                for (size_t i = 0; i < streams.size(); ++i) {
                    if (ended[i]) continue;
                    StreamEvent event;
                    // Short waits, so a client that left is noticed quickly.
                    if (!streams[i]->next(event, Milliseconds(streams.size() > 1 ? 5 : 100))) {
                        if (!sink.is_writable())
                            return false;  // the client left: the releaser cancels
                        continue;
                    }
                    if (event.kind == StreamEvent::Kind::kText) {
                        nlohmann::json logprobs = nullptr;
                        if (event.logprobs) {
                            logprobs = logprobs_json(header.chat, std::span(&*event.logprobs, 1),
                                                     tokenizer, text_bytes[i]);
                            text_bytes[i] += int64_t(tokenizer.token_to_bytes(event.token).size());
                        }
                        if (!write(sse(stream_chunk(header, int(i), event.text, nullptr, first[i],
                                                    logprobs)))) {
                            return false;  // the client left: the releaser cancels
                        }
                        first[i] = false;
                        continue;
                    }
                    ended[i] = true;
                    ++num_ended;
                    if (!event.result) {  // the engine refused it: an error event, then the end
                        failed = true;
                        write(sse(error_body({400, "invalid_request_error", event.error, "", ""})));
                        continue;
                    }
                    if (event.result->finish_reason == FinishReason::kCancelled) {
                        cut_short = true;
                    } else {
                        metrics.record(*event.result);
                    }
                    completion_tokens += int64_t(event.result->tokens.size());
                    if (!write(sse(stream_chunk(header, int(i), "",
                                                finish_reason_name(event.result->finish_reason),
                                                first[i])))) {
                        return false;  // the client left: the releaser cancels
                    }
                }
            }
            if (include_usage) write(sse(usage_chunk(header, prompt_tokens, completion_tokens)));
            write("data: [DONE]\n\n");
            sink.done();
            state->outcome_recorded = true;
            if (failed) {
                http_metrics_.record_http_error(400);
            } else if (cut_short) {
                metrics.record_request_cancelled();
            } else {
                metrics.record_request_success();
            }
            return true;
        },
        // Runs however the response ended, even when the client left before
        // the provider ever ran (the headers could not be written).
        [this, route, state](bool) {
            if (!state->outcome_recorded) {
                for (auto& stream : state->streams) stream->cancel();
                route->metrics.record_request_cancelled();
            }
            --in_flight_;
        });
}

}  // namespace servelab
