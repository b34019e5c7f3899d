// chat_format.cpp — ChatML prompt rendering, and chat prompts to token ids.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See chat_format.h.
#include "reference/chat/chat_format.h"

#include <algorithm>
#include <charconv>

namespace servelab {
namespace {

// Stands in for a message's control-token text while the template renders:
// kPlaceholderStart, the text's index in the table, kPlaceholderEnd. Neither
// byte is printable, so no template writes them and no filter changes them.
constexpr char kPlaceholderStart = '\x1e';
constexpr char kPlaceholderEnd = '\x1f';

// Replaces, in `text`, every control-token text (longest first, as the
// tokenizer matches them) and every kPlaceholderStart byte with a
// placeholder; the replaced texts are appended to `originals`.
std::string defuse(std::string_view text, std::span<const std::string_view> control_texts,
                   std::vector<std::string>& originals) {
    std::string out;
    size_t at = 0;
    while (at < text.size()) {
        std::string_view found;
        if (text[at] == kPlaceholderStart) found = text.substr(at, 1);
        for (std::string_view control : control_texts) {
            if (found.empty() && text.substr(at).starts_with(control)) found = control;
        }
        if (found.empty()) {
            out += text[at++];
            continue;
        }
        out += kPlaceholderStart + std::to_string(originals.size()) + kPlaceholderEnd;
        originals.emplace_back(found);
        at += found.size();
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
        const size_t end = rendered.find(kPlaceholderEnd, at);
        size_t index = 0;
        const char* digits = rendered.data() + at + 1;
        const char* digits_end = rendered.data() + std::min(end, rendered.size());
        const bool placeholder = rendered[at] == kPlaceholderStart &&
                                 end != std::string_view::npos && digits < digits_end &&
                                 std::from_chars(digits, digits_end, index).ptr == digits_end &&
                                 index < originals.size();
        if (!placeholder) {
            out.text += rendered[at++];
            continue;
        }
        out.plain_spans.push_back({out.text.size(), out.text.size() + originals[index].size()});
        out.text += originals[index];
        at = end + 1;
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
        defused.push_back({defuse(message.role, control_texts, originals),
                           defuse(message.content, control_texts, originals)});
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
