// token_bitmask.cpp — see token_bitmask.h.
#include "reference/constrained/token_bitmask.h"

#include <bit>
#include <limits>

namespace servelab {

int32_t TokenBitmask::count() const {
    int32_t total = 0;
    for (const uint64_t word : words_) total += std::popcount(word);
    return total;
}

void TokenBitmask::apply(std::span<float> logits) const {
    const float minus_infinity = -std::numeric_limits<float>::infinity();
    for (size_t t = 0; t < logits.size(); ++t) {
        // Ids past the mask (a model vocabulary padded beyond the tokenizer's) are never allowed.
        if (t >= size_t(size_) || !test(TokenId(t))) logits[t] = minus_infinity;
    }
}

}  // namespace servelab
