// sampling_filters.h — the decisions inside a sampler: argmax, top-k, top-p.
//
// Part of sampling (Lab 1; chapter 11.2). Kept apart from sampler.cpp so the
// lab's exercises are small functions with nothing else around them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

// One token still in the running: its score (a logit, or later a
// probability) and its id.
struct Candidate {
    float score;
    TokenId id;
};

// Index of the largest value; the lowest index wins a tie.
TokenId argmax(std::span<const float> logits);

// Sort `candidates` most likely first (ties: lower id first) and keep the
// first k; k = 0 keeps all of them (sorted).
void keep_top_k(std::vector<Candidate>& candidates, int32_t k);

// `candidates` hold probabilities, most likely first. Keep the shortest
// prefix whose probabilities add up to at least top_p (always at least one).
void keep_top_p(std::vector<Candidate>& candidates, float top_p);

}  // namespace servelab
