// llama3_tool_calls.cpp — Llama 3.1 JSON calls: {"name": …, "parameters": {…}}; several joined by
// ";".
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling).
// Llama 3.1's template asks for the call as the whole answer, a JSON object
// with "name" and "parameters"; the model may open it with the control token
// <|python_tag|> (the server puts its text back, tool_call_format.h). There
// is no marker to tell a call from an answer that happens to be JSON, so
// the whole answer must be calls, or it is content. See tool_call_parser.h.
#include <string_view>

#include "reference/chat/tool_call_parser.h"

namespace servelab {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

}  // namespace

ToolCallParse parse_llama3_tool_calls(std::string_view output) {
    ToolCallParse parse;
    size_t at = skip_json_space(output, 0);
    if (output.substr(at).starts_with(kPythonTag))
        at = skip_json_space(output, at + kPythonTag.size());
    while (true) {
        const size_t end = json_container_end(output, at);
        if (end == std::string_view::npos || output[at] != '{') return ToolCallParse{};
        const std::optional<ParsedToolCall> call = call_from_json(parse_call_json(output, at, end));
        if (!call) return ToolCallParse{};
        parse.calls.push_back(*call);
        at = skip_json_space(output, end);
        if (at == output.size()) break;
        if (output[at] != ';') return ToolCallParse{};  // text after a call: not calls at all
        at = skip_json_space(output, at + 1);
    }
    parse.called = true;
    return parse;
}

}  // namespace servelab
