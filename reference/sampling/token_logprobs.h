// token_logprobs.h — how likely a sampled token was, and its most likely rivals.
//
// Part of sampling (the server's `logprobs` / `top_logprobs`, chapter 11.7).
// The numbers describe the distribution the token was actually drawn from,
// after the logit processors (repetition, presence and frequency penalties,
// logit_bias, temperature, top-k, top-p, min-p), renormalized over the
// tokens the filters kept; tokens a filter dropped have log-probability
// -infinity. Greedy decoding (temperature 0) draws from a point mass, which
// says nothing, so it reports the log-softmax of the processed logits
// instead, whose most likely token is the one greedy picked. vLLM calls
// this choice "processed logprobs" (its other mode reports the model's raw
// logits, before any processor).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

// OpenAI's cap on top_logprobs.
inline constexpr int32_t kMaxTopLogprobs = 20;

struct TokenLogprob {
    TokenId token = 0;
    float logprob = 0.0f;  // natural log; -infinity for a token the filters dropped
};

struct SampledLogprobs {
    TokenLogprob chosen;            // the token that was sampled
    std::vector<TokenLogprob> top;  // the most likely tokens, most likely first (ties: lower id)
};

// The log-softmax of `logits` at `chosen`, and its `num_top` largest
// entries (fewer when the vocabulary is smaller). For greedy decoding.
SampledLogprobs logprobs_from_logits(std::span<const float> logits, TokenId chosen,
                                     int32_t num_top);

}  // namespace servelab
