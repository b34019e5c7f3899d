// http_server.cpp — see http_server.h.
#include "reference/server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "reference/model/chat_format.h"
#include "reference/server/openai_responses.h"

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

// Counts a handler as in flight for the graceful shutdown.
class InFlight {
  public:
    explicit InFlight(std::atomic<int64_t>& count) : count_(count) { ++count_; }
    ~InFlight() { --count_; }

  private:
    std::atomic<int64_t>& count_;
};

}  // namespace

OpenAiServer::OpenAiServer(const Model& model, EngineLoop& loop, ServerOptions options)
    : model_(model),
      loop_(loop),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()) {
    limits_.model_name = options_.model_name;
    limits_.context_length = model.config.context_length;
    limits_.vocab_size = model.config.vocab_size;
    http_->set_payload_max_length(size_t(options_.max_body_bytes));
    // Bind exclusively. httplib's default options add SO_REUSEPORT, which
    // lets a second server bind the same port and the kernel split the
    // connections between the two, silently. SO_REUSEADDR alone still lets a
    // restarted server bind while the old one's connections sit in TIME_WAIT,
    // but not while another socket listens there.
    http_->set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    const int threads = options_.num_http_threads;
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };

    http_->set_pre_routing_handler(
        [this](const httplib::Request& request, httplib::Response& response) {
            if (options_.api_key.empty() || request.path.rfind("/v1/", 0) != 0) {
                return httplib::Server::HandlerResponse::Unhandled;
            }
            if (request.get_header_value("Authorization") != "Bearer " + options_.api_key) {
                send_error(response, {401, "invalid_request_error",
                                      "missing or wrong API key (Authorization: Bearer <key>)", "",
                                      "invalid_api_key"});
                return httplib::Server::HandlerResponse::Handled;
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });
    http_->Get("/health", [this](const httplib::Request&, httplib::Response& response) {
        response.status = draining_ ? 503 : 200;
        response.set_content(draining_ ? R"({"status":"draining"})" : R"({"status":"ok"})",
                             "application/json");
    });
    http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
        const nlohmann::json body = {{"object", "list"},
                                     {"data",
                                      {{{"id", options_.model_name},
                                        {"object", "model"},
                                        {"created", unix_seconds()},
                                        {"owned_by", "servelab"}}}}};
        response.set_content(to_text(body), "application/json");
    });
    http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
        response.set_content(metrics_.render(loop_.stats()), "text/plain; version=0.0.4");
    });
    http_->Post("/v1/completions",
                [this](const httplib::Request& request, httplib::Response& response) {
                    handle_generation(request, response, false);
                });
    http_->Post("/v1/chat/completions",
                [this](const httplib::Request& request, httplib::Response& response) {
                    handle_generation(request, response, true);
                });
    // Anything httplib answers on its own (unknown route, 413 body too large,
    // 400 unparsable HTTP) still gets an OpenAI-style body.
    http_->set_error_handler([this](const httplib::Request&, httplib::Response& response) {
        if (!response.body.empty()) return;
        const std::string message =
            response.status == 404 ? "no such route"
            : response.status == 413
                ? fmt::format("the request body exceeds {} bytes", options_.max_body_bytes)
                : fmt::format("HTTP {}", response.status);
        send_error(response, {response.status,
                              response.status >= 500 ? "server_error" : "invalid_request_error",
                              message, "", ""});
    });
}

OpenAiServer::~OpenAiServer() = default;

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
    http_->listen_after_bind();
}

void OpenAiServer::stop() {
    draining_ = true;
    loop_.stop();  // admitted requests run to their end
    // Let the handlers write their last bytes before the listener closes.
    while (in_flight_ > 0) std::this_thread::sleep_for(Milliseconds(10));
    http_->stop();
}

void OpenAiServer::send_error(httplib::Response& response, const ApiError& error) {
    metrics_.record_http_error(error.status);
    response.status = error.status;
    response.set_content(to_text(error_body(error)), "application/json");
}

std::vector<TokenId> OpenAiServer::prompt_of(const ApiRequest& request) const {
    if (request.chat) {
        return model_.tokenizer.encode(format_chatml(request.messages, true), true);
    }
    if (!request.prompt_ids.empty()) return request.prompt_ids;
    std::vector<TokenId> ids = model_.tokenizer.encode(request.prompt_text, false);
    if (model_.tokenizer.add_bos() && model_.tokenizer.bos_id() >= 0) {
        ids.insert(ids.begin(), model_.tokenizer.bos_id());
    }
    return ids;
}

void OpenAiServer::handle_generation(const httplib::Request& http_request,
                                     httplib::Response& response, bool chat) {
    InFlight in_flight(in_flight_);
    if (draining_) {
        send_error(response,
                   {503, "server_error", "the server is shutting down", "", "overloaded"});
        return;
    }
    const nlohmann::json body = nlohmann::json::parse(http_request.body, nullptr, false);
    if (body.is_discarded()) {
        send_error(response, {400, "invalid_request_error", "the body is not valid JSON", "", ""});
        return;
    }
    ApiRequest request;
    std::vector<TokenId> prompt;
    try {
        request = parse_api_request(body, chat, limits_);
        prompt = prompt_of(request);
    } catch (const ApiException& e) {
        send_error(response, e.error());
        return;
    }
    const int64_t context = model_.config.context_length;
    if (prompt.empty() || int64_t(prompt.size()) >= context) {
        send_error(response, {400, "invalid_request_error",
                              fmt::format("the prompt is {} tokens; it must be 1 to {}",
                                          prompt.size(), context - 1),
                              chat ? "messages" : "prompt", "context_length_exceeded"});
        return;
    }
    const int64_t room = context - int64_t(prompt.size());
    if (request.max_tokens_given && request.params.max_tokens > room) {
        send_error(response,
                   {400, "invalid_request_error",
                    fmt::format("{} prompt tokens + max_tokens {} exceed the context of {}",
                                prompt.size(), request.params.max_tokens, context),
                    "max_tokens", "context_length_exceeded"});
        return;
    }
    request.params.max_tokens = int32_t(std::min<int64_t>(request.params.max_tokens, room));

    std::vector<std::shared_ptr<RequestStream>> streams;
    try {
        for (int i = 0; i < request.n; ++i) {
            SamplingParams params = request.params;
            params.seed = request.params.seed + uint64_t(i);
            streams.push_back(loop_.submit(prompt, params));
        }
    } catch (const QueueFull& e) {
        for (auto& stream : streams) stream->cancel();
        send_error(response, {503, "server_error", e.what(), "", "overloaded"});
        return;
    }
    const ResponseHeader header{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++),
                                unix_seconds(), request.model, chat};
    const int64_t prompt_tokens = int64_t(prompt.size());

    if (!request.stream) {
        std::vector<GenerationResult> results;
        for (auto& stream : streams) {
            StreamEvent event;
            while (true) {
                if (!stream->next(event, Milliseconds(1000))) continue;
                if (event.kind == StreamEvent::Kind::kEnd) break;
            }
            if (!event.result) {
                for (auto& other : streams) other->cancel();
                send_error(response, {400, "invalid_request_error", event.error, "", ""});
                return;
            }
            metrics_.record(*event.result);
            results.push_back(std::move(*event.result));
        }
        response.set_content(to_text(completion_response(header, results, prompt_tokens)),
                             "application/json");
        return;
    }

    // Streaming: the provider runs on this connection's thread until every
    // choice has ended (or the client is gone).
    auto state = std::make_shared<std::vector<std::shared_ptr<RequestStream>>>(std::move(streams));
    const bool include_usage = request.include_usage;
    ++in_flight_;  // released when the provider is done (it outlives this handler)
    response.set_chunked_content_provider(
        "text/event-stream",
        [this, state, header, prompt_tokens, include_usage](size_t, httplib::DataSink& sink) {
            std::vector<bool> first(state->size(), true);
            std::vector<bool> ended(state->size(), false);
            int64_t completion_tokens = 0;
            size_t num_ended = 0;
            const auto write = [&sink](const std::string& text) {
                return sink.is_writable() && sink.write(text.data(), text.size());
            };
            const auto client_gone = [&] {
                for (auto& stream : *state) stream->cancel();
                return false;
            };
            while (num_ended < state->size()) {
                for (size_t i = 0; i < state->size(); ++i) {
                    if (ended[i]) continue;
                    StreamEvent event;
                    // Short waits, so a client that left is noticed quickly.
                    if (!(*state)[i]->next(event, Milliseconds(state->size() > 1 ? 5 : 100))) {
                        if (!sink.is_writable()) return client_gone();
                        continue;
                    }
                    if (event.kind == StreamEvent::Kind::kText) {
                        if (!write(
                                sse(stream_chunk(header, int(i), event.text, nullptr, first[i])))) {
                            return client_gone();
                        }
                        first[i] = false;
                        continue;
                    }
                    ended[i] = true;
                    ++num_ended;
                    if (!event.result) {  // the engine refused it: an error event, then the end
                        write(sse(error_body({400, "invalid_request_error", event.error, "", ""})));
                        continue;
                    }
                    metrics_.record(*event.result);
                    completion_tokens += int64_t(event.result->tokens.size());
                    if (!write(sse(stream_chunk(header, int(i), "",
                                                finish_reason_name(event.result->finish_reason),
                                                first[i])))) {
                        return client_gone();
                    }
                }
            }
            if (include_usage) write(sse(usage_chunk(header, prompt_tokens, completion_tokens)));
            write("data: [DONE]\n\n");
            sink.done();
            return true;
        },
        [this](bool) { --in_flight_; });
}

}  // namespace servelab
