// chat_format.cpp — ChatML prompt rendering, and chat prompts to token ids.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See chat_format.h.
#include "reference/chat/chat_format.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

namespace servelab {
namespace {

// Stands in for a message's control-token text while the template renders:
// kPlaceholderStart, the text's index in the table, kPlaceholderEnd. They are
// the private-use characters U+E000 and U+E001: no template writes them, and
// nothing a template does to text changes them (trim does not strip them,
// as it would the ASCII separators U+001C..U+001F; upper and lower keep
// them; tojson does not escape them, as it escapes control characters, and
// it is tojson that prints a tool call's arguments or, in Llama 3.1's
// template, a tool's answer).
constexpr std::string_view kPlaceholderStart = "\xEE\x80\x80";
constexpr std::string_view kPlaceholderEnd = "\xEE\x80\x81";

// Replaces, in `text`, every control-token text (longest first, as the
// tokenizer matches them) and every kPlaceholderStart with a placeholder;
// the replaced texts are appended to `originals`.
std::string defuse(std::string_view text, std::span<const std::string_view> control_texts,
                   std::vector<std::string>& originals) {
    std::string out;
    size_t at = 0;
    while (at < text.size()) {
        std::string_view found;
        if (text.substr(at).starts_with(kPlaceholderStart)) found = kPlaceholderStart;
        for (std::string_view control : control_texts) {
            if (found.empty() && text.substr(at).starts_with(control)) found = control;
        }
        if (found.empty()) {
            out += text[at++];
            continue;
        }
        out += std::string(kPlaceholderStart) + std::to_string(originals.size()) +
               std::string(kPlaceholderEnd);
        originals.emplace_back(found);
        at += found.size();
    }
    return out;
}

// Every string in the JSON (object keys too), defused.
void defuse_json(nlohmann::ordered_json& json, std::span<const std::string_view> control_texts,
                 std::vector<std::string>& originals) {
    if (json.is_string()) {
        json = defuse(json.get<std::string>(), control_texts, originals);
    } else if (json.is_array()) {
        for (auto& item : json) defuse_json(item, control_texts, originals);
    } else if (json.is_object()) {
        nlohmann::ordered_json object = nlohmann::ordered_json::object();
        for (auto& [key, item] : json.items()) {
            defuse_json(item, control_texts, originals);
            object[defuse(key, control_texts, originals)] = item;
        }
        json = std::move(object);
    }
}

// A tool call's arguments with their strings defused. Text that is not
// JSON is defused as it is (the renderer refuses it anyway).
std::string defuse_arguments(const std::string& arguments,
                             std::span<const std::string_view> control_texts,
                             std::vector<std::string>& originals) {
    nlohmann::ordered_json json = nlohmann::ordered_json::parse(arguments, nullptr, false);
    if (json.is_discarded()) return defuse(arguments, control_texts, originals);
    defuse_json(json, control_texts, originals);
    return json.dump();
}

ChatMessage defuse_message(const ChatMessage& message,
                           std::span<const std::string_view> control_texts,
                           std::vector<std::string>& originals) {
    const auto text = [&](const std::string& s) { return defuse(s, control_texts, originals); };
    ChatMessage out = message;
    out.role = text(message.role);
    out.content = text(message.content);
    if (message.name) out.name = text(*message.name);
    if (message.tool_call_id) out.tool_call_id = text(*message.tool_call_id);
    if (message.tool_calls) {
        for (ToolCall& call : *out.tool_calls) {
            call.id = text(call.id);
            call.name = text(call.name);
            call.arguments = defuse_arguments(call.arguments, control_texts, originals);
        }
    }
    return out;
}

// The rendered prompt with each placeholder put back, and where they were.
struct Restored {
    std::string text;
    std::vector<TextSpan> plain_spans;
};

Restored restore(std::string_view rendered, std::span<const std::string> originals) {
    Restored out;
    size_t at = 0;
    while (at < rendered.size()) {
        const bool starts = rendered.substr(at).starts_with(kPlaceholderStart);
        const size_t end = starts ? rendered.find(kPlaceholderEnd, at) : std::string_view::npos;
        size_t index = 0;
        const char* digits = rendered.data() + at + kPlaceholderStart.size();
        const char* digits_end = rendered.data() + std::min(end, rendered.size());
        const bool placeholder = end != std::string_view::npos && digits < digits_end &&
                                 std::from_chars(digits, digits_end, index).ptr == digits_end &&
                                 index < originals.size();
        if (!placeholder) {
            out.text += rendered[at++];
            continue;
        }
        out.plain_spans.push_back({out.text.size(), out.text.size() + originals[index].size()});
        out.text += originals[index];
        at = end + kPlaceholderEnd.size();
    }
    return out;
}

}  // namespace

std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::string prompt;
    for (const ChatMessage& message : messages) {
        prompt += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
    }
    // The open assistant turn the model is asked to complete.
    if (add_generation_prompt) prompt += "<|im_start|>assistant\n";
    return prompt;
}

std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 const ChatRenderer& render,
                                 SpecialTokensInMessages special_tokens) {
    if (special_tokens == SpecialTokensInMessages::kParse) {
        return tokenizer.encode(render(messages), /*parse_special=*/true);
    }
    std::vector<std::string_view> control_texts = tokenizer.control_token_texts();
    std::stable_sort(control_texts.begin(), control_texts.end(),
                     [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
    std::vector<std::string> originals;
    std::vector<ChatMessage> defused;
    for (const ChatMessage& message : messages) {
        defused.push_back(defuse_message(message, control_texts, originals));
    }
    const Restored prompt = restore(render(defused), originals);
    return tokenizer.encode_with_plain_spans(prompt.text, prompt.plain_spans);
}

std::vector<TokenId> encode_chatml(const Tokenizer& tokenizer,
                                   std::span<const ChatMessage> messages,
                                   bool add_generation_prompt,
                                   SpecialTokensInMessages special_tokens) {
    return encode_chat(
        tokenizer, messages,
        [&](std::span<const ChatMessage> m) { return format_chatml(m, add_generation_prompt); },
        special_tokens);
}

}  // namespace servelab
