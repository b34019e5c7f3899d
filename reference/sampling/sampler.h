// sampler.h — pick the next token from a row of logits.
//
// Part of sampling (all labs; chapter: decoding strategies). The order is the
// usual one (as in HF transformers and llama.cpp's defaults), after the
// grammar's mask when the request is constrained (Lab 12):
//   grammar mask → repetition penalty → presence/frequency penalties → logit bias
//   → (temperature 0: argmax) → temperature → top-k → softmax → top-p
//   → min-p → renormalize → draw
// Each request owns a Sampler, so its random stream depends only on its own
// seed, never on what else is running.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "reference/constrained/token_bitmask.h"
#include "reference/sampling/sampling_filters.h"
#include "reference/sampling/sampling_params.h"
#include "reference/sampling/token_logprobs.h"

namespace servelab {

class Sampler {
  public:
    explicit Sampler(const SamplingParams& params);

    // `logits` (vocab) is modified in place (mask, penalty, temperature).
    // `history` is the sequence so far (prompt + generated), for the penalty.
    // With `logprobs`, also says how likely the token was and names the
    // params().logprobs most likely tokens (token_logprobs.h).
    // With `allowed` (a constrained request's grammar mask, Lab 12), every
    // other token's logit becomes -infinity first, so no later step can
    // bring it back; the mask must allow at least one token.
    TokenId sample(std::span<float> logits, std::span<const TokenId> history,
                   SampledLogprobs* logprobs = nullptr, const TokenBitmask* allowed = nullptr);

    // The same numbers for a token drawn elsewhere (the GPU draws on the
    // device): `chosen` under the distribution sample() would draw from.
    // Draws nothing from the random stream; `logits` is modified as by sample().
    SampledLogprobs logprobs_of(std::span<float> logits, std::span<const TokenId> history,
                                TokenId chosen, const TokenBitmask* allowed = nullptr);

    // The distribution sample() draws from, over the whole vocabulary:
    // `probs[t]` is token t's probability after every filter, renormalized
    // (0 for filtered tokens; greedy: 1 on the argmax). Draws nothing from
    // the random stream. Speculative decoding (Lab 6) verifies drafts against
    // exactly this distribution. `logits` is modified as by sample().
    void distribution(std::span<float> logits, std::span<const TokenId> history,
                      std::vector<float>& probs, const TokenBitmask* allowed = nullptr);

    // A uniform draw in [0, 1) from 53 random bits: the same on every
    // platform, unlike std::uniform_real_distribution.
    double next_uniform();

    const SamplingParams& params() const { return params_; }

  private:
    // The grammar's mask, the penalties and the bias, before any filter. The
    // first call's history is the prompt (a request samples its first token
    // right after it), so its length says where the generated tokens begin.
    void adjust_logits(std::span<float> logits, std::span<const TokenId> history,
                       const TokenBitmask* allowed);

    // Temperature, top-k, softmax, top-p and min-p: candidates_ becomes the
    // tokens kept, most likely first, with their probabilities (not yet
    // renormalized after top-p / min-p).
    void keep_candidates(std::span<const float> logits);

    // Fills `out` for `chosen` right after adjust_logits (and, when not
    // greedy, keep_candidates) ran on `logits`.
    void describe(std::span<const float> logits, TokenId chosen, SampledLogprobs& out) const;

    SamplingParams params_;
    std::optional<size_t> prompt_length_;  // set by the first call
    std::mt19937_64 rng_;
    std::vector<Candidate> candidates_;  // reused between calls
};

// Divide positive logits by `penalty` and multiply negative ones, once per
// distinct token among the last `window` tokens of `history` (0 = all).
void apply_repetition_penalty(std::span<float> logits, std::span<const TokenId> history,
                              float penalty, int32_t window);

// OpenAI's presence and frequency penalties over `generated` (the tokens
// generated so far): logit[t] -= frequency * count[t] + presence * (count[t] > 0).
void apply_presence_frequency_penalties(std::span<float> logits, std::span<const TokenId> generated,
                                        float presence, float frequency);

// logit[t] += bias for each (t, bias); ids outside the vocabulary are skipped.
void apply_logit_bias(std::span<float> logits,
                      std::span<const std::pair<TokenId, float>> logit_bias);

}  // namespace servelab
