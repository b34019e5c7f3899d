// ngram_proposer.cpp — see ngram_proposer.h.
#include "reference/speculative/ngram_proposer.h"

#include <algorithm>

#include "kernels/common/error.h"

namespace servelab {

std::vector<TokenId> propose_ngram(std::span<const TokenId> tokens, int64_t k,
                                   const NgramOptions& options) {
    if (k < 0) throw Error("n-gram proposer: k must be >= 0");
    if (options.min_n < 1 || options.max_n < options.min_n) {
        throw Error("n-gram proposer: need 1 <= min_n <= max_n");
    }
    // BEGIN SOLUTION lab06
    // HINT: for n from max_n (at most length - 1) down to min_n: the suffix of n tokens
    // HINT: look for its latest earlier occurrence that ends before the suffix does
    // HINT: found: return the up-to-k tokens that follow it; none for any n: return {}
    const int64_t length = int64_t(tokens.size());
    for (int64_t n = std::min(options.max_n, length - 1); n >= options.min_n; --n) {
        const auto suffix = tokens.subspan(size_t(length - n));
        // Latest first: the most recent context is the likeliest to repeat.
        // `start` is where an earlier occurrence begins; it must end before
        // the suffix itself does, so at least one token follows it.
        for (int64_t start = length - n - 1; start >= 0; --start) {
            if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
            const int64_t from = start + n;
            const int64_t count = std::min(k, length - from);
            return {tokens.begin() + from, tokens.begin() + from + count};
        }
    }
    return {};
    // END SOLUTION
}

}  // namespace servelab
