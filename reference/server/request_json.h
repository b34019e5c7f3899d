// request_json.h — a request body parsed as JSON, within bounds a client cannot stretch.
//
// Part of the serving layer (chapter 11.7, docs/serving.md "Reliability").
// nlohmann::json parses without recursion, but what it builds is not
// small, and not everything that walks it is iterative:
//   - every value is a 16-byte node, and every array or object a heap
//     allocation of its own: a 1 MiB body of "[" parsed into about 70 MiB;
//   - dump(), copies and comparisons recurse once per level: a prompt
//     nested 70,000 arrays deep overflowed the router's stack.
// So one linear scan of the bytes comes first, and refuses with a 400 that
// names the limit:
//   - nesting deeper than max_depth (a real request needs about 5);
//   - more than max_elements values (arrays' items and objects' members,
//     counted by their separators): at most about 100 bytes each once
//     parsed, whatever the body's size;
//   - a NUL byte anywhere (JSON allows none outside escapes, and a C string
//     would end there).
// Then the strict parse: trailing bytes after the value are an error too.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

namespace servelab {

struct JsonLimits {
    int max_depth = 64;
    int64_t max_elements = 65536;
};

// The body as JSON. Throws ApiException (400, invalid_request_error) when it
// breaks a limit or is not JSON.
nlohmann::json parse_request_json(std::string_view body, const JsonLimits& limits = {});
// The same with objects' keys in the body's order, for what a chat template
// prints as written (the request's tools: reference/server/chat_request.h).
nlohmann::ordered_json parse_ordered_request_json(std::string_view body,
                                                  const JsonLimits& limits = {});

}  // namespace servelab
