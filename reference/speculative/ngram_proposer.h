// ngram_proposer.h — draft tokens without a draft model: continue the latest repeat of the last
// n-gram.
//
// Lab 6 (chapter 11.6, speculative decoding). "Prompt lookup decoding":
// text that quotes, edits or summarizes its input repeats it, so the tokens
// that followed the previous occurrence of the last few tokens are a good
// guess for the next few. Costs no model at all — only a search over the
// sequence so far — which is why it pays off whenever the guess is right
// even occasionally.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

struct NgramOptions {
    int64_t max_n = 3;  // try the longest suffix first: a longer match is a likelier repeat
    int64_t min_n = 1;
};

// Up to `k` tokens proposed to follow `tokens` (prompt + output so far): for
// n from max_n down to min_n, the most recent earlier occurrence of the
// last n tokens, and the (at most k) tokens after it. Empty when nothing
// matches. Throws servelab::Error for k < 0 or 1 <= min_n <= max_n violated.
std::vector<TokenId> propose_ngram(std::span<const TokenId> tokens, int64_t k,
                                   const NgramOptions& options = {});

}  // namespace servelab
