// verify_drafts.h — one request's drafts checked against the target's logits, as its Sampler would
// draw.
//
// Lab 6 (chapter 11.6, speculative decoding). The glue between the target's
// verification pass and the rejection sampler: the target's distribution at
// each position is what the request's own Sampler would draw from there —
// its repetition penalty (over the history plus the drafts before that
// position), temperature, top-k, top-p and min-p (Sampler::distribution).
// Greedy requests keep the longest prefix the target's argmax agrees with
// (verify_greedy) and draw no random numbers; sampling requests go through
// verify_stochastic with the request's random stream, so their tokens are
// distributed exactly as without speculation.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/sampling/sampler.h"
#include "reference/speculative/rejection_sampler.h"

namespace servelab {

// target_logits: (K+1, vocab) raw logits, row i after history + d_1..d_i.
// draft_probs: (K, vocab) the draft's q_i, or empty when each draft was a
// point mass (an n-gram guess, or any greedy draft). allowed: a constrained
// request's K+1 grammar masks, row i's after d_1..d_i (empty: none). Throws
// servelab::Error for mismatched sizes.
Verification verify_drafts(Sampler& sampler, std::span<const TokenId> history,
                           std::span<const TokenId> drafts, std::span<const float> draft_probs,
                           std::span<const float> target_logits, int64_t vocab_size,
                           std::span<const TokenBitmask> allowed = {});

}  // namespace servelab
