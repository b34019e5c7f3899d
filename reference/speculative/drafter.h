// drafter.h — what every drafter of speculative decoding does: guess the next K tokens, cheaply.
//
// Lab 6 (chapter 11.6, speculative decoding). The engine asks each step's
// speculating requests for drafts in one call per drafter, so a model
// drafter can run its K passes over all of them as batches. Three drafters
// implement it:
//   ngram_drafter.h   prompt lookup: no model, a search over the sequence;
//   model_drafter.h   a model run autoregressively for K tokens: a separate
//                     small draft model sharing the target's vocabulary, or
//                     the target's own first layers (self-speculative early
//                     exit).
// A drafter may propose fewer tokens than asked (no n-gram match, a full
// draft pool): the step then verifies what there is, or just decodes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/model/tokenizer.h"
#include "reference/sampling/sampler.h"

namespace servelab {

struct DraftRequest {
    int64_t request_id = 0;
    std::span<const TokenId> tokens;  // prompt + output so far; the drafts follow the last one
    int64_t max_drafts = 0;           // propose at most this many (>= 1)
    // The request's own Sampler: its filters shape a model drafter's
    // distribution q, and its random stream draws the drafts.
    Sampler* sampler = nullptr;
};

struct Draft {
    std::vector<TokenId> tokens;  // 0..max_drafts tokens
    // (tokens.size(), vocab): the q_i each token was drawn from. Empty when
    // the drafts were not drawn (n-gram guesses, greedy drafts): q is then a
    // point mass on each drafted token.
    std::vector<float> probs;
};

class Drafter {
  public:
    virtual ~Drafter() = default;
    // One draft per request, in order.
    virtual std::vector<Draft> propose(std::span<const DraftRequest> requests) = 0;
    // The target kept only the first `num_tokens` tokens of the request's
    // sequence: forget any state past them (a model drafter's KV cache).
    virtual void rollback(int64_t /*request_id*/, int64_t /*num_tokens*/) {}
    // The request finished or was preempted: free its state.
    virtual void release(int64_t /*request_id*/) {}
};

}  // namespace servelab
