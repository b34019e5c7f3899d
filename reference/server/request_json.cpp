// request_json.cpp — see request_json.h.
#include "reference/server/request_json.h"

#include <fmt/format.h>

#include "reference/common/json_string_skipper.h"
#include "reference/server/openai_protocol.h"

namespace servelab {
namespace {

[[noreturn]] void refuse(const std::string& message) {
    throw ApiException({400, "invalid_request_error", message, "", "invalid_json"});
}

// One pass over the bytes, strings skipped (with their escapes): the
// deepest nesting and the number of elements, or a refusal.
void check_shape(std::string_view body, const JsonLimits& limits) {
    int depth = 0;
    int64_t elements = 0;
    JsonStringSkipper strings;
    for (const char c : body) {
        if (c == '\0') refuse("the request body holds a NUL byte");
        if (strings.in_string(c)) continue;
        if (c == '[' || c == '{') {
            if (++depth > limits.max_depth) {
                refuse(
                    fmt::format("the request body nests arrays and objects more than {} "
                                "deep",
                                limits.max_depth));
            }
            ++elements;
        } else if (c == ']' || c == '}') {
            --depth;
        } else if (c == ',') {
            ++elements;
        }
        if (elements > limits.max_elements) {
            refuse(
                fmt::format("the request body has more than {} JSON values", limits.max_elements));
        }
    }
}

}  // namespace

nlohmann::json parse_request_json(std::string_view body, const JsonLimits& limits) {
    check_shape(body, limits);
    nlohmann::json parsed = nlohmann::json::parse(body, nullptr, false);
    if (parsed.is_discarded()) refuse("the body is not valid JSON");
    return parsed;
}

nlohmann::ordered_json parse_ordered_request_json(std::string_view body, const JsonLimits& limits) {
    check_shape(body, limits);
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(body, nullptr, false);
    if (parsed.is_discarded()) refuse("the body is not valid JSON");
    return parsed;
}

}  // namespace servelab
