// log_softmax.cpp — see log_softmax.h.
#include "reference/eval/log_softmax.h"

#include <algorithm>
#include <cmath>

namespace servelab {

double log_sum_exp(std::span<const float> logits) {
    const double max_logit = *std::max_element(logits.begin(), logits.end());
    double sum_exp = 0.0;
    for (const float logit : logits) sum_exp += std::exp(double(logit) - max_logit);
    return max_logit + std::log(sum_exp);
}

double token_nll(std::span<const float> logits, int64_t target) {
    return log_sum_exp(logits) - double(logits[size_t(target)]);
}

}  // namespace servelab
