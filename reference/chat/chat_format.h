// chat_format.h — render a conversation as the prompt text, or the token ids,
// a chat model expects.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// format_chatml is the fallback for a model whose own template
// (chat_template.h) is missing or cannot be rendered. encode_chat, whichever
// template renders, is where a front end decides whether text inside a
// message may spell the template's control tokens (docs/serving.md,
// "Special tokens in chat messages").
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

// A function call an assistant turn made (OpenAI's message.tool_calls[i],
// always of type "function").
struct ToolCall {
    std::string id;         // what the tool's answer names (its tool_call_id)
    std::string name;       // the function called
    std::string arguments;  // its arguments: JSON text ("" reads as {})
    // The order the client wrote the keys in, which a template that prints a
    // call with tojson prints (Mistral's prints the function): the official
    // client sends {"id", "function": {"arguments", "name"}, "type"}, the
    // API's examples {"id", "type", "function": {"name", "arguments"}}.
    bool type_before_function = true;
    bool name_before_arguments = true;
};

// One turn of a conversation, with what chat templates read of it. A
// template sees a dict holding role and content, and the other keys only
// when the message had them (templates test `'tool_calls' in message` and
// `message.name is defined`), as Hugging Face passes the client's messages.
struct ChatMessage {
    std::string role;  // "system", "user", "assistant" or "tool"
    std::string content;
    bool content_is_null = false;  // "content": null (an assistant turn of calls only): None
    // An assistant turn's calls; absent unless the message had "tool_calls".
    // The template sees each as {"id", "type": "function", "function":
    // {"name", "arguments"}} with the arguments parsed into an object.
    std::optional<std::vector<ToolCall>> tool_calls = std::nullopt;
    std::optional<std::string> tool_call_id = std::nullopt;  // a "tool" turn: the call it answers
    std::optional<std::string> name = std::nullopt;          // who spoke (a tool's name), if given
};

// ChatML (the format SmolLM2's chat template produces):
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
// It shows role and content only (ChatML has no place for tool calls).
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

// A chat template: messages → the prompt text (ChatML, or the model's own,
// chat_template.h), with or without the open assistant turn as the caller chose.
using ChatRenderer = std::function<std::string(std::span<const ChatMessage>)>;

// render(messages), tokenized. kParse is exactly
// tokenizer.encode(render(messages), /*parse_special=*/true). kText first
// replaces every control token's text inside a message (its role, content,
// name, tool call id, and its tool calls' ids, names and the strings of
// their arguments) by a placeholder, renders, puts the texts back and encodes with those ranges
// kept plain (Tokenizer::encode_with_plain_spans): the template's own markers
// are control tokens, a message's are text, and for messages that spell no
// control token the ids are identical to kParse's. Either way
// decode(ids, /*render_special=*/true) is the rendered text (for valid UTF-8
// whose every byte has a token). User-defined tokens are matched in both
// modes (Tokenizer::encode). Never adds BOS, like encode.
std::vector<TokenId> encode_chat(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                 const ChatRenderer& render,
                                 SpecialTokensInMessages special_tokens);
// encode_chat with format_chatml(messages, add_generation_prompt).
std::vector<TokenId> encode_chatml(const Tokenizer& tokenizer,
                                   std::span<const ChatMessage> messages,
                                   bool add_generation_prompt,
                                   SpecialTokensInMessages special_tokens);

// SmolLM2's chat template puts this system message first whenever the
// conversation does not start with one (the tests check its rendering
// against format_chatml with it).
inline constexpr std::string_view kSmolLmDefaultSystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

}  // namespace servelab
