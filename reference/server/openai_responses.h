// openai_responses.h — the JSON bodies the server sends back, in OpenAI's shapes.
//
// Part of the serving layer (chapter 11.7). Completions and chat
// completions, whole or as server-sent-event chunks, and the usage block.
// Field names and object types follow OpenAI's API reference, so the
// official client parses them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "reference/engine/generator.h"

namespace servelab {

struct ResponseHeader {
    std::string id;       // "cmpl-…" or "chatcmpl-…"
    int64_t created = 0;  // unix seconds
    std::string model;
    bool chat = false;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The whole response: one choice per result, in order. With
// `with_token_ids`, the prompt's ids ("prompt_token_ids") and each choice's
// ("token_ids") too.
nlohmann::json completion_response(const ResponseHeader& header,
                                   const std::vector<GenerationResult>& results,
                                   int64_t prompt_tokens, bool with_token_ids = false);

// One streamed chunk of choice `index`: new text (finish_reason null), or
// the last chunk of that choice (text empty, its finish reason set). Chat's
// first chunk of a choice also carries the assistant role.
nlohmann::json stream_chunk(const ResponseHeader& header, int index, const std::string& text,
                            const char* finish_reason, bool first);
// The usage chunk (stream_options.include_usage): no choices, usage set.
nlohmann::json usage_chunk(const ResponseHeader& header, int64_t prompt_tokens,
                           int64_t completion_tokens);

}  // namespace servelab
