// tool_call_parser.cpp — the dispatch, and the JSON reading the format parsers share.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling).
// See tool_call_parser.h.
#include "reference/chat/tool_call_parser.h"

#include "reference/common/json_string_skipper.h"

namespace servelab {

ToolCallParse parse_tool_calls(ToolCallFormat format, std::string_view output, size_t max_calls) {
    ToolCallParse parse;
    switch (format) {
        case ToolCallFormat::kHermes:
            parse = parse_hermes_tool_calls(output);
            break;
        case ToolCallFormat::kLlama3Json:
            parse = parse_llama3_tool_calls(output);
            break;
        case ToolCallFormat::kMistral:
            parse = parse_mistral_tool_calls(output);
            break;
        case ToolCallFormat::kNone:
            break;
    }
    if (!parse.called || parse.calls.empty()) return ToolCallParse{};
    if (parse.calls.size() > max_calls) parse.calls.resize(max_calls);
    return parse;
}

size_t json_container_end(std::string_view text, size_t begin) {
    if (begin >= text.size() || (text[begin] != '{' && text[begin] != '[')) {
        return std::string_view::npos;
    }
    int depth = 0;
    JsonStringSkipper strings;
    for (size_t at = begin; at < text.size(); ++at) {
        const char c = text[at];
        if (strings.in_string(c)) continue;
        if (c == '{' || c == '[') {
            if (++depth > kMaxCallDepth) return std::string_view::npos;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return at + 1;
        }
    }
    return std::string_view::npos;
}

size_t skip_json_space(std::string_view text, size_t at) {
    while (at < text.size() &&
           (text[at] == ' ' || text[at] == '\n' || text[at] == '\r' || text[at] == '\t')) {
        ++at;
    }
    return at;
}

nlohmann::ordered_json parse_call_json(std::string_view text, size_t begin, size_t end) {
    return nlohmann::ordered_json::parse(text.substr(begin, end - begin), nullptr,
                                         /*allow_exceptions=*/false);
}

std::optional<ParsedToolCall> call_from_json(const nlohmann::ordered_json& json) {
    if (!json.is_object()) return std::nullopt;
    const auto name = json.find("name");
    if (name == json.end() || !name->is_string() || name->get<std::string>().empty()) {
        return std::nullopt;
    }
    auto arguments = json.find("arguments");
    if (arguments == json.end()) arguments = json.find("parameters");
    if (arguments == json.end()) return std::nullopt;
    nlohmann::ordered_json object = *arguments;
    if (object.is_string()) {  // some models write the arguments as a JSON string
        const std::string text = object.get<std::string>();
        const size_t begin = skip_json_space(text, 0);
        const size_t end = json_container_end(text, begin);  // bounds its depth too
        if (end == std::string_view::npos || skip_json_space(text, end) != text.size()) {
            return std::nullopt;
        }
        object = parse_call_json(text, begin, end);
    }
    if (!object.is_object()) return std::nullopt;
    return ParsedToolCall{
        name->get<std::string>(),
        object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)};
}

}  // namespace servelab
