// next_token_kl.cpp — see next_token_kl.h.
#include "reference/eval/next_token_kl.h"

#include <cmath>

#include "reference/eval/log_softmax.h"

namespace servelab {

double kl_divergence(std::span<const float> reference_logits, std::span<const float> logits) {
    // log P0(i) − log P(i) = (l0_i − lse0) − (l_i − lse), so
    // KL = Σ_i P0(i) · (l0_i − l_i) + lse − lse0.
    const double reference_lse = log_sum_exp(reference_logits);
    const double lse = log_sum_exp(logits);
    double weighted_gap = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        const double reference_prob = std::exp(double(reference_logits[i]) - reference_lse);
        weighted_gap += reference_prob * (double(reference_logits[i]) - double(logits[i]));
    }
    // Rounding can leave a tiny negative where the two rows are equal; KL is never below 0.
    const double kl = weighted_gap + lse - reference_lse;
    return kl > 0.0 ? kl : 0.0;
}

}  // namespace servelab
