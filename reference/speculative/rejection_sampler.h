// rejection_sampler.h — verify K drafted tokens against the target model's distributions.
//
// Lab 6 (chapter 11.6, speculative decoding; Leviathan et al. 2023, Chen et
// al. 2023). The target model scores the drafted tokens d_1..d_K in ONE
// forward pass over K+1 positions, which gives its distribution p_i at each
// position i = 0..K (p_i follows the prefix plus d_1..d_i). Verification
// then decides how many drafts to keep and which token comes next:
//   greedy: keep the longest prefix with d_{i+1} = argmax p_i; the next token
//     is argmax p at the first mismatch (or p_K, the "bonus", if none);
//   stochastic: keep d_{i+1} with probability min(1, p_i(d) / q_i(d)), q_i
//     being the draft's distribution it was sampled from; at the first
//     rejection draw from the residual max(0, p_i - q_i), normalized; when
//     all K are kept draw the bonus from p_K.
// The stochastic rule makes every emitted token distributed exactly as the
// target alone would sample it, whatever q is: a good draft only makes more
// tokens per pass. (The residual is what p has left after the accepted
// part min(p, q): drawing from p instead would count that part twice.)
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

struct Verification {
    int64_t num_accepted = 0;  // drafted tokens kept, 0..K
    TokenId next_token = 0;    // the correction at the first rejection, or the bonus
};

// target_logits: (K+1, vocab) rows, row i for the position after d_1..d_i.
Verification verify_greedy(std::span<const TokenId> draft, std::span<const float> target_logits,
                           int64_t vocab_size);

// target_probs: (K+1, vocab); draft_probs: (K, vocab), each row summing to 1,
// the draft's q_i with q_i(d_{i+1}) > 0. `uniform` returns draws in [0, 1)
// (the request's own stream). Throws servelab::Error for mismatched sizes or
// a drafted token the draft gave probability 0.
Verification verify_stochastic(std::span<const TokenId> draft, std::span<const float> target_probs,
                               std::span<const float> draft_probs, int64_t vocab_size,
                               const std::function<double()>& uniform);

// The token whose cumulative weight first exceeds u · sum(weights), in
// index order (weights >= 0, not all 0).
TokenId draw_from(std::span<const float> weights, double u);

}  // namespace servelab
