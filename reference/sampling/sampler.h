// sampler.h — pick the next token from a row of logits.
//
// Part of sampling (all labs; chapter: decoding strategies). The order is the
// usual one (as in HF transformers and llama.cpp's defaults):
//   repetition penalty → (temperature 0: argmax) → temperature → top-k
//   → softmax → top-p → min-p → renormalize → draw
// Each request owns a Sampler, so its random stream depends only on its own
// seed, never on what else is running.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "reference/sampling/sampling_filters.h"
#include "reference/sampling/sampling_params.h"

namespace servelab {

class Sampler {
  public:
    explicit Sampler(const SamplingParams& params);

    // `logits` (vocab) is modified in place (penalty, temperature).
    // `history` is the sequence so far (prompt + generated), for the penalty.
    TokenId sample(std::span<float> logits, std::span<const TokenId> history);

    // The distribution sample() draws from, over the whole vocabulary:
    // `probs[t]` is token t's probability after every filter, renormalized
    // (0 for filtered tokens; greedy: 1 on the argmax). Draws nothing from
    // the random stream. Speculative decoding (Lab 6) verifies drafts against
    // exactly this distribution. `logits` is modified as by sample().
    void distribution(std::span<float> logits, std::span<const TokenId> history,
                      std::vector<float>& probs);

    // A uniform draw in [0, 1) from 53 random bits: the same on every
    // platform, unlike std::uniform_real_distribution.
    double next_uniform();

    const SamplingParams& params() const { return params_; }

  private:
    // Temperature, top-k, softmax, top-p and min-p: candidates_ becomes the
    // tokens kept, most likely first, with their probabilities (not yet
    // renormalized after top-p / min-p).
    void keep_candidates(std::span<const float> logits);

    SamplingParams params_;
    std::mt19937_64 rng_;
    std::vector<Candidate> candidates_;  // reused between calls
};

// Divide positive logits by `penalty` and multiply negative ones, once per
// distinct token among the last `window` tokens of `history` (0 = all).
void apply_repetition_penalty(std::span<float> logits, std::span<const TokenId> history,
                              float penalty, int32_t window);

}  // namespace servelab
