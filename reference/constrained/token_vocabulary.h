// token_vocabulary.h — the vocabulary as the grammar sees it: each token's bytes.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise. A
// mask decides token by token whether the grammar can take the token's bytes
// next, so it needs the bytes each id stands for (Tokenizer::token_to_bytes),
// and which ids end the output (allowed only where the grammar may end).
// Control tokens other than those never belong to the output's text: a
// constrained request never samples them.
#pragma once

#include <string>
#include <vector>

#include "reference/model/tokenizer.h"

namespace servelab {

struct TokenVocabulary {
    // Per token id: its bytes; empty for a token that is never allowed
    // (control and unused tokens, and any token with no bytes) and for the
    // end tokens (they stand for the end of the output, not for text).
    std::vector<std::string> token_bytes;
    // The ids that end generation (Tokenizer::is_end_of_generation), allowed
    // exactly where the grammar may end.
    std::vector<TokenId> end_tokens;

    int32_t size() const { return int32_t(token_bytes.size()); }
    static TokenVocabulary from_tokenizer(const Tokenizer& tokenizer);
};

}  // namespace servelab
