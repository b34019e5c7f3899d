// chat_format.h — render a conversation as the prompt text a chat model expects.
//
// Part of the model loader (all labs). SmolLM2's GGUF chat template produces
// ChatML; servelab formats it directly rather than running a Jinja engine.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace servelab {

// ChatML (the format SmolLM2's chat template produces):
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
struct ChatMessage {
    std::string role;  // "system", "user" or "assistant"
    std::string content;
};
std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt);

// SmolLM2's chat template puts this system message first whenever the
// conversation does not start with one; callers add it themselves.
inline constexpr std::string_view kSmolLmDefaultSystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

}  // namespace servelab
