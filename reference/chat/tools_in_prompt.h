// tools_in_prompt.h — tools for a chat model whose template has no place for them.
//
// Support code, not an exercise (chapter 11, serving: tool calling; Lab 12,
// chapter 11.6, forces the calls). Many small chat models (SmolLM2 among
// them) have a template that renders role and content only. Such a model
// can still be offered tools the way llama.cpp's server offers them to any
// model: the tools are described in the system message, with the format a
// call must take, and past calls and their results are written into the
// conversation as text. The format is Hermes's (<tool_call>{...}</tool_call>,
// tool_call_format.h), read back by the same parser; with tool_choice
// "required" or a named function a grammar makes the model write exactly it.
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <vector>

#include "reference/chat/chat_format.h"

namespace servelab {

// `messages` for a template without tools: a system message describing
// `tools` (merged into the first message when it is a system message), each
// assistant turn's calls appended to its content as <tool_call> blocks, and
// each "tool" turn a user turn holding <tool_response>{...}</tool_response>
// (ChatML templates name only the roles they know).
std::vector<ChatMessage> with_tools_in_prompt(std::span<const ChatMessage> messages,
                                              const nlohmann::ordered_json& tools);

// Whether the conversation holds calls or tool results (which a template
// without tools would drop).
bool has_tool_turns(std::span<const ChatMessage> messages);

}  // namespace servelab
