// sampler.cpp — see sampler.h.
#include "reference/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace servelab {

TokenId argmax(std::span<const float> logits) {
    TokenId best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
        if (logits[i] > logits[size_t(best)]) best = TokenId(i);
    }
    return best;
}

void apply_repetition_penalty(std::span<float> logits, std::span<const TokenId> history,
                              float penalty, int32_t window) {
    if (penalty == 1.0f) return;
    const size_t start =
        (window > 0 && history.size() > size_t(window)) ? history.size() - size_t(window) : 0;
    std::unordered_set<TokenId> seen;
    for (size_t i = start; i < history.size(); ++i) {
        const TokenId id = history[i];
        if (id < 0 || size_t(id) >= logits.size() || !seen.insert(id).second) continue;
        float& logit = logits[size_t(id)];
        // Dividing a negative logit would make the token MORE likely, so the
        // penalty multiplies those instead (Keskar et al., 2019).
        logit = logit > 0.0f ? logit / penalty : logit * penalty;
    }
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

double Sampler::next_uniform() {
    return double(rng_() >> 11) * 0x1.0p-53;
}

TokenId Sampler::sample(std::span<float> logits, std::span<const TokenId> history) {
    apply_repetition_penalty(logits, history, params_.repetition_penalty,
                             params_.repetition_window);
    if (params_.temperature == 0.0f) return argmax(logits);

    // Candidates sorted by logit, most likely first (ties: lower id first).
    candidates_.clear();
    for (size_t i = 0; i < logits.size(); ++i) {
        candidates_.emplace_back(logits[i] / params_.temperature, TokenId(i));
    }
    const auto more_likely = [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    size_t keep = candidates_.size();
    if (params_.top_k > 0 && size_t(params_.top_k) < keep) keep = size_t(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + std::ptrdiff_t(keep),
                      candidates_.end(), more_likely);
    candidates_.resize(keep);

    // Softmax over the survivors (max first, so exp never overflows).
    const float max_logit = candidates_.front().first;
    double total = 0.0;
    for (auto& [value, id] : candidates_) {
        value = std::exp(value - max_logit);
        total += value;
    }
    for (auto& [value, id] : candidates_) value = float(value / total);

    // top-p: the smallest prefix whose probability reaches top_p (at least one token).
    if (params_.top_p < 1.0f) {
        double cumulative = 0.0;
        size_t prefix = 0;
        while (prefix < candidates_.size() && cumulative < params_.top_p) {
            cumulative += candidates_[prefix].first;
            ++prefix;
        }
        candidates_.resize(std::max<size_t>(prefix, 1));
    }
    // min-p: drop tokens far less likely than the best one (Nguyen et al., 2024).
    if (params_.min_p > 0.0f) {
        const float threshold = params_.min_p * candidates_.front().first;
        size_t kept = 1;
        while (kept < candidates_.size() && candidates_[kept].first >= threshold) ++kept;
        candidates_.resize(kept);
    }

    double remaining = 0.0;
    for (const auto& [p, id] : candidates_) remaining += p;
    const double target = next_uniform() * remaining;
    double cumulative = 0.0;
    for (const auto& [p, id] : candidates_) {
        cumulative += p;
        if (target < cumulative) return id;
    }
    return candidates_.back().second;  // rounding left target at the very end
}

}  // namespace servelab
