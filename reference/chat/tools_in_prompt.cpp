// tools_in_prompt.cpp — see tools_in_prompt.h.
#include "reference/chat/tools_in_prompt.h"

#include <fmt/format.h>

#include <string>

namespace servelab {
namespace {

std::string tools_description(const nlohmann::ordered_json& tools) {
    std::string text =
        "You can call functions to help answer. The functions you may call are listed below, "
        "one JSON object each, between <tools> and </tools>:\n<tools>\n";
    for (const auto& tool : tools) text += tool.dump() + "\n";
    text +=
        "</tools>\nTo call a function, answer with a JSON object naming it and giving its "
        "arguments, between <tool_call> and </tool_call>, one block per call:\n"
        "<tool_call>\n{\"name\": \"function name\", \"arguments\": {\"argument\": \"value\"}}\n"
        "</tool_call>";
    return text;
}

std::string call_block(const ToolCall& call) {
    const nlohmann::ordered_json arguments =
        call.arguments.empty() ? nlohmann::ordered_json::object()
                               : nlohmann::ordered_json::parse(call.arguments, nullptr, false);
    const nlohmann::ordered_json object = {
        {"name", call.name},
        {"arguments",
         arguments.is_discarded() ? nlohmann::ordered_json(call.arguments) : arguments}};
    return "<tool_call>\n" + object.dump() + "\n</tool_call>";
}

}  // namespace

bool has_tool_turns(std::span<const ChatMessage> messages) {
    for (const ChatMessage& m : messages) {
        if (m.role == "tool" || (m.tool_calls && !m.tool_calls->empty())) return true;
    }
    return false;
}

std::vector<ChatMessage> with_tools_in_prompt(std::span<const ChatMessage> messages,
                                              const nlohmann::ordered_json& tools) {
    std::vector<ChatMessage> out;
    if (tools.is_array() && !tools.empty()) {
        const std::string description = tools_description(tools);
        if (!messages.empty() && messages.front().role == "system") {
            out.push_back({"system", messages.front().content + "\n\n" + description});
            messages = messages.subspan(1);
        } else {
            out.push_back({"system", description});
        }
    }
    for (const ChatMessage& m : messages) {
        ChatMessage plain{m.role, m.content_is_null ? std::string() : m.content};
        if (m.tool_calls) {
            for (const ToolCall& call : *m.tool_calls) {
                plain.content += (plain.content.empty() ? "" : "\n") + call_block(call);
            }
        }
        if (m.role == "tool") {
            plain.role = "user";
            plain.content = "<tool_response>\n" + m.content + "\n</tool_response>";
        }
        out.push_back(std::move(plain));
    }
    return out;
}

}  // namespace servelab
