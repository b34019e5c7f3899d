// chat_format.h — render a conversation as the prompt text, or the token ids,
// a chat model expects.
//
// Part of the model loader (all labs). SmolLM2's GGUF chat template produces
// ChatML; servelab formats it directly rather than running a Jinja engine.
// encode_chatml is where a front end decides whether text inside a message
// may spell the template's control tokens (docs/serving.md, "Special tokens
// in chat messages").
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

// ChatML (the format SmolLM2's chat template produces):
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
struct ChatMessage {
    std::string role;  // "system", "user" or "assistant"
    std::string content;
};
std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt);

// What a control token's text inside a message's role or content becomes
// (the values of `servelab serve --special-tokens-in-messages`).
enum class SpecialTokensInMessages {
    // Its control token, as if the template had written it: "<|im_start|>"
    // in a user message opens a new turn. What Hugging Face's
    // apply_chat_template + tokenizer and llama.cpp's server do; right when
    // whoever writes the messages may also write the prompt.
    kParse,
    // Plain text, tokenized byte by byte like any other text; only the
    // template's own markers are control tokens, so a message cannot open,
    // close or forge a turn. For content from people the operator does not trust.
    kText,
};

// format_chatml(messages, add_generation_prompt), tokenized. kParse is
// exactly tokenizer.encode(format_chatml(...), /*parse_special=*/true). kText
// gives the markers their ids and encodes the text between two markers as
// one run with parse_special off, so the pre-tokenizer sees the same runs as
// kParse: for messages that spell no control token the ids are identical.
// Either way decode(ids, /*render_special=*/true) is format_chatml's text
// (for valid UTF-8 whose every byte has a token). User-defined tokens are
// matched in both modes (Tokenizer::encode), and a vocabulary without special
// tokens for the markers gets kParse's ids in both (it has no turn token for
// a message to forge). Never adds BOS, like encode.
std::vector<TokenId> encode_chatml(const Tokenizer& tokenizer,
                                   std::span<const ChatMessage> messages,
                                   bool add_generation_prompt,
                                   SpecialTokensInMessages special_tokens);

// SmolLM2's chat template puts this system message first whenever the
// conversation does not start with one; callers add it themselves.
inline constexpr std::string_view kSmolLmDefaultSystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

}  // namespace servelab
