// chat_format.cpp — ChatML prompt rendering.
//
// Part of the model loader (all labs). See chat_format.h.
#include "reference/model/chat_format.h"

namespace servelab {

std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::string prompt;
    for (const ChatMessage& message : messages) {
        prompt += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
    }
    // The open assistant turn the model is asked to complete.
    if (add_generation_prompt) prompt += "<|im_start|>assistant\n";
    return prompt;
}

}  // namespace servelab
