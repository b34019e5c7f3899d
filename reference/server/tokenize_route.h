// tokenize_route.h — POST /tokenize and /detokenize: the prompt a body becomes, and back.
//
// Part of the serving layer (chapter 11.7, docs/serving.md). vLLM's shapes:
//   POST /tokenize    {"model", "prompt"}              a text or token ids
//                     {"model", "messages", "add_generation_prompt"}  (true by default)
//                  →  {"count", "max_model_len", "tokens"}
//   POST /detokenize  {"model", "tokens"}  →  {"prompt"}
// A prompt is parsed as /v1/completions parses it and a conversation as
// /v1/chat/completions does (openai_protocol.h: the same fields, checked
// the same way), and both are built by the one front door
// (RequestBuilder::prompt_of): the tokens are exactly the prompt a
// generation request with the same body computes, BOS and chat template
// included. They are not checked against the context: counting a prompt
// that may be too long is what the route is for; "max_model_len" says
// how long a request the model admits. /detokenize writes control tokens
// out (as vLLM's tokenizer.decode does), so a conversation's tokens
// decode to its rendered prompt.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "reference/server/model_route.h"
#include "reference/server/openai_protocol.h"

namespace servelab {

// The answer to a /tokenize body in `answer`, and nullopt; else the error
// to send. Thread-safe: routes are only read.
std::optional<ApiError> tokenize_answer(std::string_view body,
                                        const std::vector<std::unique_ptr<ModelRoute>>& routes,
                                        nlohmann::json& answer);

// The same for a /detokenize body.
std::optional<ApiError> detokenize_answer(std::string_view body,
                                          const std::vector<std::unique_ptr<ModelRoute>>& routes,
                                          nlohmann::json& answer);

}  // namespace servelab
