// token_logprobs.cpp — see token_logprobs.h.
#include "reference/sampling/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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
    const size_t count = std::min(size_t(std::max(num_top, 0)), logits.size());
    if (count == 0) return out;
    std::vector<TokenId> ids(logits.size());
    std::iota(ids.begin(), ids.end(), TokenId(0));
    std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(count), ids.end(),
                      [&](TokenId a, TokenId b) {
                          if (logits[size_t(a)] != logits[size_t(b)])
                              return logits[size_t(a)] > logits[size_t(b)];
                          return a < b;
                      });
    for (size_t i = 0; i < count; ++i) out.top.push_back({ids[i], logprob(size_t(ids[i]))});
    return out;
}

}  // namespace servelab
