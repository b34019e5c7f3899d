// sampler.cpp — see sampler.h.
#include "reference/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "kernels/common/error.h"

namespace servelab {

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

void apply_presence_frequency_penalties(std::span<float> logits, std::span<const TokenId> generated,
                                        float presence, float frequency) {
    if (presence == 0.0f && frequency == 0.0f) return;
    std::unordered_map<TokenId, int64_t> counts;
    for (const TokenId id : generated) {
        if (id >= 0 && size_t(id) < logits.size()) ++counts[id];
    }
    for (const auto& [id, count] : counts) {
        logits[size_t(id)] -= frequency * float(count) + presence;
    }
}

void apply_logit_bias(std::span<float> logits,
                      std::span<const std::pair<TokenId, float>> logit_bias) {
    for (const auto& [id, bias] : logit_bias) {
        if (id >= 0 && size_t(id) < logits.size()) logits[size_t(id)] += bias;
    }
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

void Sampler::adjust_logits(std::span<float> logits, std::span<const TokenId> history,
                            const TokenBitmask* allowed) {
    if (!prompt_length_) prompt_length_ = history.size();
    // The mask first: a penalty or a bias must never revive a token the
    // grammar forbids (-infinity stays -infinity under all of them).
    if (allowed != nullptr) allowed->apply(logits);
    apply_repetition_penalty(logits, history, params_.repetition_penalty,
                             params_.repetition_window);
    const size_t generated_from = std::min(*prompt_length_, history.size());
    apply_presence_frequency_penalties(logits, history.subspan(generated_from),
                                       params_.presence_penalty, params_.frequency_penalty);
    apply_logit_bias(logits, params_.logit_bias);
}

double Sampler::next_uniform() {
    return double(rng_() >> 11) * 0x1.0p-53;
}

TokenId Sampler::sample(std::span<float> logits, std::span<const TokenId> history,
                        SampledLogprobs* logprobs, const TokenBitmask* allowed) {
    adjust_logits(logits, history, allowed);
    TokenId chosen = 0;
    if (params_.temperature == 0.0f) {
        chosen = argmax(logits);
    } else {
        keep_candidates(logits);
        double remaining = 0.0;
        for (const Candidate& c : candidates_) remaining += c.score;
        const double target = next_uniform() * remaining;
        double cumulative = 0.0;
        chosen = candidates_.back().id;  // if rounding leaves target at the very end
        for (const Candidate& c : candidates_) {
            cumulative += c.score;
            if (target < cumulative) {
                chosen = c.id;
                break;
            }
        }
    }
    if (logprobs != nullptr) describe(logits, chosen, *logprobs);
    return chosen;
}

SampledLogprobs Sampler::logprobs_of(std::span<float> logits, std::span<const TokenId> history,
                                     TokenId chosen, const TokenBitmask* allowed) {
    adjust_logits(logits, history, allowed);
    if (params_.temperature > 0.0f) keep_candidates(logits);
    SampledLogprobs out;
    describe(logits, chosen, out);
    return out;
}

void Sampler::describe(std::span<const float> logits, TokenId chosen, SampledLogprobs& out) const {
    const int32_t num_top = std::max(params_.logprobs, 0);
    if (params_.temperature == 0.0f) {
        out = logprobs_from_logits(logits, chosen, num_top);
        return;
    }
    // candidates_ are the kept tokens, most likely first, with probabilities
    // that top-p and min-p left unnormalized: divide by what is left.
    double remaining = 0.0;
    for (const Candidate& c : candidates_) remaining += c.score;
    const auto logprob = [&](float probability) {
        return probability > 0.0f ? float(std::log(double(probability) / remaining))
                                  : -std::numeric_limits<float>::infinity();
    };
    out.chosen = {chosen, -std::numeric_limits<float>::infinity()};
    for (const Candidate& c : candidates_) {
        if (c.id == chosen) out.chosen.logprob = logprob(c.score);
    }
    out.top.clear();
    for (size_t i = 0; i < candidates_.size() && i < size_t(num_top); ++i) {
        out.top.push_back({candidates_[i].id, logprob(candidates_[i].score)});
    }
}

void Sampler::distribution(std::span<float> logits, std::span<const TokenId> history,
                           std::vector<float>& probs, const TokenBitmask* allowed) {
    adjust_logits(logits, history, allowed);
    probs.assign(logits.size(), 0.0f);
    if (params_.temperature == 0.0f) {
        probs[size_t(argmax(logits))] = 1.0f;
        return;
    }
    keep_candidates(logits);
    double remaining = 0.0;
    for (const Candidate& c : candidates_) remaining += c.score;
    for (const Candidate& c : candidates_) probs[size_t(c.id)] = float(c.score / remaining);
}

void Sampler::keep_candidates(std::span<const float> logits) {
    candidates_.clear();
    for (size_t i = 0; i < logits.size(); ++i) {
        // A token the grammar masked is no candidate at all: with probability
        // 0 it must not even be the draw's fallback at the very end.
        if (logits[i] == -std::numeric_limits<float>::infinity()) continue;
        candidates_.push_back({logits[i] / params_.temperature, TokenId(i)});
    }
    if (candidates_.empty()) throw Error("sample: the grammar's mask allows no token");
    keep_top_k(candidates_, params_.top_k);  // also sorts, most likely first

    // Softmax over the survivors (max first, so exp never overflows).
    const float max_logit = candidates_.front().score;
    double total = 0.0;
    for (Candidate& c : candidates_) {
        c.score = std::exp(c.score - max_logit);
        total += c.score;
    }
    for (Candidate& c : candidates_) c.score = float(c.score / total);

    if (params_.top_p < 1.0f) keep_top_p(candidates_, params_.top_p);
    // min-p: drop tokens far less likely than the best one (Nguyen et al., 2024).
    if (params_.min_p > 0.0f) {
        const float threshold = params_.min_p * candidates_.front().score;
        size_t kept = 1;
        while (kept < candidates_.size() && candidates_[kept].score >= threshold) ++kept;
        candidates_.resize(kept);
    }
}

}  // namespace servelab
