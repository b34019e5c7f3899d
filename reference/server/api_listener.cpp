// api_listener.cpp — see api_listener.h.
#include "reference/server/api_listener.h"

#include <sys/socket.h>

#include <string>

#include "reference/server/openai_protocol.h"

namespace servelab {

std::unique_ptr<HttpListener> make_api_listener(const ListenerLimits& limits,
                                                int64_t max_body_bytes, HttpMetrics& metrics) {
    auto listener = std::make_unique<HttpListener>(
        limits,
        [](int status, const std::string& message) {
            // A message may quote the client's bytes (a method name): invalid
            // UTF-8 becomes U+FFFD rather than an exception on the reader thread.
            return error_body({status, status >= 500 ? "server_error" : "invalid_request_error",
                               message, "", status == 503 ? "overloaded" : ""})
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        },
        [&metrics](const Refusal& refusal) {
            metrics.record_error_answer(refusal.status, refusal.method, refusal.path);
        });
    listener->set_payload_max_length(size_t(max_body_bytes));
    listener->set_socket_options([](socket_t sock) {
        const int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    return listener;
}

}  // namespace servelab
