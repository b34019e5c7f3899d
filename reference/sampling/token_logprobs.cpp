// token_logprobs.cpp — see token_logprobs.h.
#include "reference/sampling/token_logprobs.h"

#include <algorithm>
#include <cmath>

namespace servelab {

SampledLogprobs logprobs_from_logits(std::span<const float> logits, TokenId chosen,
                                     int32_t num_top) {
    // log p_t = l_t - log sum_j exp(l_j); subtracting the max first keeps
    // every exp in (0, 1], so the sum never overflows.
    const float max_logit = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (const float logit : logits) sum += std::exp(double(logit) - double(max_logit));
    const double log_normalizer = double(max_logit) + std::log(sum);
    const auto logprob = [&](size_t id) { return float(double(logits[id]) - log_normalizer); };

    SampledLogprobs out;
    out.chosen = {chosen, logprob(size_t(chosen))};
    // The num_top largest in one pass, kept sorted (at most kMaxTopLogprobs,
    // so an insertion is a few moves): nothing vocabulary-sized is allocated.
    const size_t count = std::min(size_t(std::max(num_top, 0)), logits.size());
    const auto before = [&](TokenId a, TokenId b) {
        return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)]
                                                      : a < b;
    };
    std::vector<TokenId> best;
    best.reserve(count + 1);
    for (size_t id = 0; id < logits.size() && count > 0; ++id) {
        if (best.size() == count && !before(TokenId(id), best.back())) continue;
        best.insert(std::upper_bound(best.begin(), best.end(), TokenId(id), before), TokenId(id));
        if (best.size() > count) best.pop_back();
    }
    for (const TokenId id : best) out.top.push_back({id, logprob(size_t(id))});
    return out;
}

}  // namespace servelab
