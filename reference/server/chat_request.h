// chat_request.h — the fields only a chat request has: its messages, its tools, its template
// options.
//
// Part of the serving layer (chapter 11.7; tools: docs/serving.md "Tool calling").
// parse_api_request (openai_protocol.h) hands a /v1/chat/completions body
// here, and every chat field is checked for shape before anything renders:
//   messages               system / developer / user / assistant / tool turns;
//                          content a string or text parts, or null for an
//                          assistant turn that only calls tools; assistant
//                          "tool_calls" [{id, type: "function", function: {name,
//                          arguments: JSON text of an object}}]; a tool turn's
//                          "tool_call_id"; any turn's "name";
//   tools                  [{type: "function", function: {name, description,
//                          parameters: a JSON Schema object, strict}}];
//   tool_choice            "none" | "auto" | "required" | {"type": "function",
//                          "function": {"name": one of the tools}};
//   parallel_tool_calls    true (default) or false: at most one call;
//   add_generation_prompt, continue_final_message, chat_template_kwargs
//                          apply_chat_template's options, as vLLM takes them
//                          (ChatTemplateOptions; both flags true is refused).
// Whether the model can call tools at all is the front door's question
// (RequestBuilder::build: its chat template must show a tool-call format).
//
// The body is nlohmann::ordered_json because the tools and the template's
// variables reach the template as written, and a template prints a dict's
// keys in order (nlohmann::json would sort them).
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include <vector>

#include "reference/chat/chat_format.h"
#include "reference/chat/chat_template.h"
#include "reference/chat/tool_request.h"
#include "reference/server/openai_protocol.h"

namespace servelab {

struct ChatRequest {
    std::vector<ChatMessage> messages;
    ChatTemplateOptions template_options;
    ToolRequest tools;
};

// Limits on what a request may offer (OpenAI's own).
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxFunctionNameBytes = 64;

// The chat fields of `body`. Throws ApiException (400) naming the field
// ("messages[2].tool_calls[0].function.arguments", "tool_choice", ...).
ChatRequest parse_chat_request(const nlohmann::ordered_json& body);

// A /v1/completions body may not carry the chat fields above but "messages":
// throws ApiException (400) naming the first one present.
void refuse_chat_fields(const nlohmann::json& body);

// The fields only /v1/chat/completions reads (the completions route
// refuses them, and knows them for that reason).
inline constexpr std::string_view kChatFields[] = {"messages",
                                                   "tools",
                                                   "tool_choice",
                                                   "parallel_tool_calls",
                                                   "add_generation_prompt",
                                                   "continue_final_message",
                                                   "chat_template_kwargs"};

}  // namespace servelab
