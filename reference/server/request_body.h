// request_body.h — reading a request's body within a size limit and a deadline.
//
// Part of the serving layer (chapter 11.7, docs/serving.md "Reliability").
// The server and the router both read bodies this way, through the
// HttpListener's content reader, so the rule is written once:
//   - a declared Content-Length over the limit is refused before a byte is
//     read;
//   - a chunked body (no declared length) is read only up to the limit: the
//     first byte past it stops the read, so memory stays bounded by the
//     limit, not by what the client sends;
//   - a body cut short, malformed, or not received within the listener's
//     body deadline is a 400.
// After any refusal the connection must close: the rest of the body is
// still in the stream, and is not a request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "reference/server/openai_protocol.h"

namespace httplib {
struct Request;
class ContentReader;
}  // namespace httplib

namespace servelab {

// Reads the body into `body` (empty on entry). nullopt when it was read
// whole; else the answer to send (413 or 400), after which the caller closes
// the connection. `body_timeout_s` only words the message.
std::optional<ApiError> read_request_body(const httplib::Request& request,
                                          const httplib::ContentReader& content_reader,
                                          int64_t max_body_bytes, double body_timeout_s,
                                          std::string& body);

}  // namespace servelab
