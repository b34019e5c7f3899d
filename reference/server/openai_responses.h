// openai_responses.h — the JSON bodies the server sends back, in OpenAI's shapes.
//
// Part of the serving layer (chapter 11.7). Completions and chat
// completions, whole or as server-sent-event chunks, and the usage block.
// Field names and object types follow OpenAI's API reference, so the
// official client parses them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/model/tokenizer.h"
#include "reference/sampling/token_logprobs.h"

namespace servelab {

struct ResponseHeader {
    std::string id;       // "cmpl-…" or "chatcmpl-…"
    int64_t created = 0;  // unix seconds
    std::string model;
    bool chat = false;
};

// `body` as the text sent. Model output can hold invalid UTF-8 (a random
// model, a cut-off byte sequence); JSON must not, so such bytes become
// U+FFFD instead of an error.
std::string response_text(const nlohmann::json& body);

// {"prompt_tokens", "completion_tokens", "total_tokens",
//  "prompt_tokens_details": {"cached_tokens"}}: cached_tokens are the prompt
// tokens the prefix cache held (GenerationResult::cached_prompt_tokens),
// whole blocks of them. A request of n choices computes its prompt once, so
// they are counted once: choice 0's (its siblings fork its blocks).
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                          int64_t cached_prompt_tokens = 0);

// A choice's "logprobs" for `logprobs` (its tokens in order), in the
// header's API shape. Chat: {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}]}. Completions (legacy):
// {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
// "text_offset"}, offsets counted in bytes from `text_offset` (where the
// first token's text begins in the choice's text). A token that is not
// valid UTF-8 alone (part of a character) is written "bytes:\xNN..."; its
// "bytes" are exact. A log-probability of -infinity (a token the filters
// dropped) is written -9999.0, as vLLM does: JSON has no infinity.
nlohmann::json logprobs_json(bool chat, std::span<const SampledLogprobs> logprobs,
                             const Tokenizer& tokenizer, int64_t text_offset = 0);

// The whole response: one choice per result, in order, with its logprobs
// when it has them. With `with_token_ids`, the prompt's ids
// ("prompt_token_ids") and each choice's ("token_ids") too.
nlohmann::json completion_response(const ResponseHeader& header,
                                   const std::vector<GenerationResult>& results,
                                   int64_t prompt_tokens, const Tokenizer& tokenizer,
                                   bool with_token_ids = false);

// One streamed chunk of choice `index`: new text (finish_reason null), or
// the last chunk of that choice (text empty, its finish reason set). Chat's
// first chunk of a choice also carries the assistant role. `logprobs` is
// the chunk's logprobs_json (null: none).
nlohmann::json stream_chunk(const ResponseHeader& header, int index, const std::string& text,
                            const char* finish_reason, bool first,
                            const nlohmann::json& logprobs = nullptr);
// The usage chunk (stream_options.include_usage): no choices, usage set.
nlohmann::json usage_chunk(const ResponseHeader& header, int64_t prompt_tokens,
                           int64_t completion_tokens, int64_t cached_prompt_tokens = 0);

}  // namespace servelab
