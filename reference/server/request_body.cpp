// request_body.cpp — see request_body.h.
#include "reference/server/request_body.h"

#include <fmt/format.h>
#include <httplib.h>

namespace servelab {
namespace {

// The declared Content-Length, -1 when there is none, -2 when it is not a
// plain decimal number of at most 18 digits.
int64_t declared_length(const httplib::Request& request) {
    if (!request.has_header("Content-Length")) return -1;
    const std::string declared = request.get_header_value("Content-Length");
    if (declared.empty() || declared.size() > 18) return -2;
    for (const char c : declared) {
        if (c < '0' || c > '9') return -2;
    }
    return std::stoll(declared);
}

}  // namespace

std::optional<ApiError> read_request_body(const httplib::Request& request,
                                          const httplib::ContentReader& content_reader,
                                          int64_t max_body_bytes, double body_timeout_s,
                                          std::string& body) {
    const ApiError too_large{
        413, "invalid_request_error",
        fmt::format("the request body exceeds {} bytes (--max-body-bytes)", max_body_bytes), "",
        ""};
    const int64_t declared = declared_length(request);
    if (declared == -2) {
        return ApiError{400, "invalid_request_error",
                        "the Content-Length header is not a decimal number of at most 18 digits",
                        "", ""};
    }
    if (declared > max_body_bytes) return too_large;
    bool over_limit = false;
    const bool complete = content_reader([&](const char* data, size_t length) {
        if (int64_t(body.size() + length) > max_body_bytes) {
            over_limit = true;
            return false;  // stop reading: memory stays bounded by the limit
        }
        body.append(data, length);
        return true;
    });
    if (over_limit) return too_large;
    if (!complete) {
        return ApiError{400, "invalid_request_error",
                        fmt::format("the request body was malformed, cut short, or not received "
                                    "within {} s",
                                    body_timeout_s),
                        "", ""};
    }
    return std::nullopt;
}

}  // namespace servelab
