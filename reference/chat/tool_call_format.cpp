// tool_call_format.cpp — see tool_call_format.h.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling).
#include "reference/chat/tool_call_format.h"

namespace servelab {

std::string_view tool_call_format_name(ToolCallFormat format) {
    switch (format) {
        case ToolCallFormat::kHermes:
            return "hermes";
        case ToolCallFormat::kLlama3Json:
            return "llama3_json";
        case ToolCallFormat::kMistral:
            return "mistral";
        case ToolCallFormat::kNone:
            break;
    }
    return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view template_source) {
    const auto has = [&](std::string_view text) {
        return template_source.find(text) != std::string_view::npos;
    };
    if (has("<tool_call>")) return ToolCallFormat::kHermes;
    if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
    if (has("<|start_header_id|>") && has("\"parameters\"")) return ToolCallFormat::kLlama3Json;
    return ToolCallFormat::kNone;
}

ToolCallSyntax tool_call_syntax(ToolCallFormat format) {
    ToolCallSyntax syntax;
    switch (format) {
        case ToolCallFormat::kHermes:
            // Qwen2.5's template renders a call as "\n<tool_call>\n{...}\n</tool_call>".
            syntax.call_begin = "<tool_call>\n";
            syntax.call_end = "\n</tool_call>";
            syntax.call_separator = "\n";
            syntax.name_key = "name";
            syntax.arguments_key = "arguments";
            syntax.content_before_calls = true;
            syntax.call_markers = {"<tool_call>"};
            break;
        case ToolCallFormat::kLlama3Json:
            syntax.call_separator = "; ";
            syntax.name_key = "name";
            syntax.arguments_key = "parameters";
            syntax.call_markers = {"<|python_tag|>", "{"};
            syntax.starts_at_beginning = true;
            syntax.control_markers = {"<|python_tag|>"};
            break;
        case ToolCallFormat::kMistral:
            syntax.calls_begin = "[TOOL_CALLS][";
            syntax.call_separator = ", ";
            syntax.calls_end = "]";
            syntax.name_key = "name";
            syntax.arguments_key = "arguments";
            syntax.content_before_calls = true;
            syntax.call_markers = {"[TOOL_CALLS]"};
            syntax.control_markers = {"[TOOL_CALLS]"};
            break;
        case ToolCallFormat::kNone:
            break;
    }
    return syntax;
}

}  // namespace servelab
