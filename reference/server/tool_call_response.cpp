// tool_call_response.cpp — see tool_call_response.h.
#include "reference/server/tool_call_response.h"

#include <algorithm>

namespace servelab {

ToolCallIds::ToolCallIds(ToolCallFormat format)
    : format_(format), random_(std::random_device{}()) {}

std::string ToolCallIds::next() {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const bool mistral = format_ == ToolCallFormat::kMistral;
    std::string id = mistral ? "" : "call_";
    std::uniform_int_distribution<size_t> letter(0, sizeof(kAlphabet) - 2);
    for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[letter(random_)];
    return id;
}

MarkerTokens marker_tokens(ToolCallFormat format, const Tokenizer& tokenizer) {
    MarkerTokens markers;
    for (const std::string& marker : tool_call_syntax(format).control_markers) {
        const TokenId id = tokenizer.find_token(marker);
        if (id >= 0 && tokenizer.token_type(id) == TokenType::kControl) {
            markers.emplace_back(id, marker);
        }
    }
    return markers;
}

std::string text_with_marker(TokenId token, const std::string& text, const MarkerTokens& markers) {
    for (const auto& [id, marker] : markers) {
        if (id == token && text.empty()) return marker;
    }
    return text;
}

std::string text_with_markers(const GenerationResult& result, const Tokenizer& tokenizer,
                              const MarkerTokens& markers) {
    if (markers.empty()) return result.text;
    std::string text;
    size_t taken = 0;   // bytes of result.text copied
    size_t offset = 0;  // bytes the tokens so far decode to
    for (const TokenId token : result.tokens) {
        const auto marker = std::find_if(markers.begin(), markers.end(),
                                         [&](const auto& m) { return m.first == token; });
        if (marker == markers.end()) {
            offset += tokenizer.token_to_bytes(token).size();
            continue;
        }
        if (offset > result.text.size()) break;  // cut off by a stop string
        text += result.text.substr(taken, offset - taken) + marker->second;
        taken = offset;
    }
    return text + result.text.substr(taken);
}

nlohmann::json tool_calls_json(const std::vector<ParsedToolCall>& calls, ToolCallIds& ids) {
    nlohmann::json list = nlohmann::json::array();
    for (const ParsedToolCall& call : calls) {
        list.push_back({{"id", ids.next()},
                        {"type", "function"},
                        {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    }
    return list;
}

void add_tool_calls(nlohmann::json& body, const std::vector<GenerationResult>& results,
                    const ToolRequest& tools, const Tokenizer& tokenizer) {
    if (!tools.parses_calls()) return;
    const MarkerTokens markers = marker_tokens(tools.format, tokenizer);
    ToolCallIds ids(tools.format);
    for (size_t i = 0; i < results.size(); ++i) {
        const ToolCallParse parse = parse_tool_calls(
            tools.format, text_with_markers(results[i], tokenizer, markers), tools.max_calls());
        if (!parse.called) continue;
        nlohmann::json& choice = body["choices"][i];
        choice["message"]["content"] =
            parse.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parse.content);
        choice["message"]["tool_calls"] = tool_calls_json(parse.calls, ids);
        choice["finish_reason"] = "tool_calls";
    }
}

nlohmann::json tool_call_chunk(const ResponseHeader& header, int index, int call_index,
                               const nlohmann::json& call, bool first) {
    nlohmann::json chunk = stream_chunk(header, index, "", nullptr, first);
    nlohmann::json delta = call;
    delta["index"] = call_index;
    nlohmann::json& choice_delta = chunk["choices"][0]["delta"];
    choice_delta.erase("content");
    choice_delta["tool_calls"] = nlohmann::json::array({delta});
    return chunk;
}

}  // namespace servelab
