// sampling_filters.cpp — see sampling_filters.h. Lab 1's exercises: argmax, keep_top_k, keep_top_p.
#include "reference/sampling/sampling_filters.h"

#include <algorithm>

namespace servelab {

TokenId argmax(std::span<const float> logits) {
    // BEGIN SOLUTION lab01
    // HINT: on a tie keep the first (lowest) index
    TokenId best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[size_t(best)]) best = TokenId(i);
    }
    return best;
    // END SOLUTION
}

void keep_top_k(std::vector<Candidate>& candidates, int32_t k) {
    // BEGIN SOLUTION lab01
    // HINT: std::partial_sort sorts only the first k; order by score, then by lower id
    const auto more_likely = [](const Candidate& a, const Candidate& b) {
        return a.score > b.score || (a.score == b.score && a.id < b.id);
    };
    const size_t keep = (k > 0 && size_t(k) < candidates.size()) ? size_t(k) : candidates.size();
    std::partial_sort(candidates.begin(), candidates.begin() + std::ptrdiff_t(keep),
                      candidates.end(), more_likely);
    candidates.resize(keep);
    // END SOLUTION
}

void keep_top_p(std::vector<Candidate>& candidates, float top_p) {
    // BEGIN SOLUTION lab01
    // HINT: add probabilities in order until the sum reaches top_p
    double cumulative = 0.0;
    size_t prefix = 0;
    while (prefix < candidates.size() && cumulative < top_p) {
        cumulative += candidates[prefix].score;
        ++prefix;
    }
    candidates.resize(std::max<size_t>(prefix, 1));
    // END SOLUTION
}

}  // namespace servelab
