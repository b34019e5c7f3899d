// mistral_tool_calls.cpp — Mistral calls: [TOOL_CALLS][{"name": …, "arguments": {…}}, …].
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling).
// Mistral's v3 tokenizer models (7B Instruct v0.3, Nemo, Small) answer with
// the control token [TOOL_CALLS] (whose text the server puts back,
// tool_call_format.h) and a JSON list of calls, after whatever they said
// first. See tool_call_parser.h.
#include <string_view>

#include "reference/chat/tool_call_parser.h"

namespace servelab {
namespace {

constexpr std::string_view kMarker = "[TOOL_CALLS]";

}  // namespace

ToolCallParse parse_mistral_tool_calls(std::string_view output) {
    ToolCallParse parse;
    const size_t marker = output.find(kMarker);
    if (marker == std::string_view::npos) return parse;
    parse.content = std::string(output.substr(0, marker));
    const size_t begin = skip_json_space(output, marker + kMarker.size());
    const size_t end = json_container_end(output, begin);
    if (end == std::string_view::npos) return ToolCallParse{};
    const nlohmann::ordered_json json = parse_call_json(output, begin, end);
    // A list of calls, or (some fine-tunes) one call object alone.
    const nlohmann::ordered_json calls =
        json.is_object() ? nlohmann::ordered_json::array({json}) : json;
    if (!calls.is_array() || calls.empty()) return ToolCallParse{};
    for (const nlohmann::ordered_json& item : calls) {
        const std::optional<ParsedToolCall> call = call_from_json(item);
        if (!call) return ToolCallParse{};
        parse.calls.push_back(*call);
    }
    parse.called = true;
    return parse;
}

}  // namespace servelab
