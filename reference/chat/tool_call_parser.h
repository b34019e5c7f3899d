// tool_call_parser.h — a model's answer read back as function calls, one parser per format.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling).
// The server asks this after generation (and a stream asks it once the answer is
// complete, tool_call_stream.h): is the answer, in the model's format
// (tool_call_format.h), a set of calls? A parser never throws and never
// guesses: output that is not well-formed calls in its format — a call's JSON
// cut short, a missing name, arguments that are not an object, nesting
// deeper than kMaxCallDepth, invalid UTF-8 — is plain content, the whole of it.
// What each format allows around its calls:
//   hermes       text before the first <tool_call> is the content; each
//                <tool_call> holds one JSON object and ends at </tool_call>
//                (or at the end of the answer, for the last); text between and
//                after the blocks is dropped, as vLLM drops it;
//   llama3_json  the answer is only calls: optional <|python_tag|>, then JSON
//                objects joined by ";" (whitespace allowed around each);
//   mistral      text before [TOOL_CALLS] is the content; after it a JSON list
//                of call objects (or one object); text after the list is dropped.
// In every format a call object names its function under "name" and its
// arguments under "arguments" or "parameters" (an object, or a string that
// holds one); other keys are ignored.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/chat/tool_call_format.h"

namespace servelab {

struct ParsedToolCall {
    std::string name;
    std::string arguments;  // the arguments object as compact JSON text, keys in the model's order
};

struct ToolCallParse {
    bool called = false;                // false: the whole answer is content
    std::string content;                // called: the text before the calls ("" when none)
    std::vector<ParsedToolCall> calls;  // called: at least one
};

// JSON nested deeper than this in a call is not a call (bounded work on a
// model's runaway brackets).
inline constexpr int kMaxCallDepth = 64;

// Reads `output` as calls in `format` (kNone: never called). At most
// `max_calls` are kept, the first ones (parallel_tool_calls false: 1).
ToolCallParse parse_tool_calls(ToolCallFormat format, std::string_view output,
                               size_t max_calls = std::numeric_limits<size_t>::max());

// The parsers, one per format (hermes_tool_calls.cpp, llama3_tool_calls.cpp,
// mistral_tool_calls.cpp).
ToolCallParse parse_hermes_tool_calls(std::string_view output);
ToolCallParse parse_llama3_tool_calls(std::string_view output);
ToolCallParse parse_mistral_tool_calls(std::string_view output);

// What they share (tool_call_parser.cpp).
// One past the end of the JSON object or list that starts at text[begin]
// ('{' or '['), found by matching brackets outside strings; npos when it is
// not closed, or nests deeper than kMaxCallDepth. (Whether it is valid JSON
// is for the JSON parser to say.)
size_t json_container_end(std::string_view text, size_t begin);
// The first byte at or after `at` that is not JSON whitespace.
size_t skip_json_space(std::string_view text, size_t at);
// `json` as a call: an object with a non-empty string "name" and arguments
// as described above; nullopt otherwise.
std::optional<ParsedToolCall> call_from_json(const nlohmann::ordered_json& json);
// The JSON text text[begin, end) parsed; a discarded value when it is not JSON.
nlohmann::ordered_json parse_call_json(std::string_view text, size_t begin, size_t end);

}  // namespace servelab
