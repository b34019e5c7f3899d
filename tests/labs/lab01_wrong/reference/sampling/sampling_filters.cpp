// KNOWN-WRONG implementation for the grader self-test (tests/labs/README.md): argmax keeps the last
// of tied maxima; top-k does not sort; top-p keeps one token too many. sampling_filters.cpp — see
// sampling_filters.h. Lab 1's exercises: argmax, keep_top_k, keep_top_p.
#include "reference/sampling/sampling_filters.h"

#include <algorithm>

namespace servelab {

TokenId argmax(std::span<const float> logits) {
    TokenId best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] >= logits[size_t(best)]) best = TokenId(i);
    }
    return best;
}

void keep_top_k(std::vector<Candidate>& candidates, int32_t k) {
    const auto more_likely = [](const Candidate& a, const Candidate& b) {
        return a.score > b.score || (a.score == b.score && a.id < b.id);
    };
    const size_t keep = (k > 0 && size_t(k) < candidates.size()) ? size_t(k) : candidates.size();
    (void)more_likely;  // never sorts: keeps the first k token ids
    candidates.resize(keep);
}

void keep_top_p(std::vector<Candidate>& candidates, float top_p) {
    double cumulative = 0.0;
    size_t prefix = 0;
    while (prefix < candidates.size() && cumulative < top_p) {
        cumulative += candidates[prefix].score;
        ++prefix;
    }
    candidates.resize(std::min(prefix + 1, candidates.size()));
}

}  // namespace servelab
