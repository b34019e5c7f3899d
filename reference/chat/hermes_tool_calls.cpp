// hermes_tool_calls.cpp — Hermes / Qwen2.5 calls: <tool_call>{"name": …, "arguments":
// {…}}</tool_call>.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling).
// The format of NousResearch's Hermes models, which Qwen2.5 (and many
// templates since) took over: each call is a JSON object inside its own
// <tool_call> block, after whatever the model said first. See tool_call_parser.h.
#include <string_view>

#include "reference/chat/tool_call_parser.h"

namespace servelab {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

}  // namespace

ToolCallParse parse_hermes_tool_calls(std::string_view output) {
    ToolCallParse parse;
    size_t open = output.find(kOpen);
    if (open == std::string_view::npos) return parse;
    parse.content = std::string(output.substr(0, open));
    while (open != std::string_view::npos) {
        // The block's object is found by its brackets, not by searching for
        // </tool_call>, which an argument's text may contain.
        const size_t begin = skip_json_space(output, open + kOpen.size());
        const size_t end = json_container_end(output, begin);
        if (end == std::string_view::npos) return ToolCallParse{};
        const std::optional<ParsedToolCall> call =
            call_from_json(parse_call_json(output, begin, end));
        if (!call) return ToolCallParse{};
        parse.calls.push_back(*call);
        // Then </tool_call>, or the end of the answer (a last block left open).
        const size_t after = skip_json_space(output, end);
        if (after < output.size() && !output.substr(after).starts_with(kClose)) {
            return ToolCallParse{};
        }
        open = output.find(kOpen, after);
    }
    parse.called = true;
    return parse;
}

}  // namespace servelab
