// rejection_sampler.cpp — see rejection_sampler.h.
#include "reference/speculative/rejection_sampler.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/error.h"
#include "reference/sampling/sampling_filters.h"

namespace servelab {
namespace {

void check_sizes(std::span<const TokenId> draft, size_t target_values, int64_t vocab_size) {
    if (vocab_size < 1 || target_values != (draft.size() + 1) * size_t(vocab_size)) {
        throw Error(fmt::format("verify: {} drafted tokens need {} target rows of {}", draft.size(),
                                draft.size() + 1, vocab_size));
    }
    for (TokenId d : draft) {
        if (d < 0 || d >= vocab_size)
            throw Error("verify: a drafted token is outside the vocabulary");
    }
}

}  // namespace

TokenId draw_from(std::span<const float> weights, double u) {
    double total = 0.0;
    for (float w : weights) total += w;
    const double target = u * total;
    double cumulative = 0.0;
    TokenId last_positive = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        if (weights[i] <= 0.0f) continue;
        cumulative += weights[i];
        last_positive = TokenId(i);
        if (target < cumulative) return TokenId(i);
    }
    return last_positive;  // rounding left target at the very end
}

Verification verify_greedy(std::span<const TokenId> draft, std::span<const float> target_logits,
                           int64_t vocab_size) {
    check_sizes(draft, target_logits.size(), vocab_size);
    const auto row = [&](size_t i) {
        return target_logits.subspan(i * size_t(vocab_size), size_t(vocab_size));
    };
    // BEGIN SOLUTION lab06
    // HINT: count the drafts while draft[i] == argmax(row(i)); stop at the first mismatch
    // HINT: the next token is argmax of the row you stopped at (row K when all matched)
    Verification result;
    while (size_t(result.num_accepted) < draft.size() &&
           argmax(row(size_t(result.num_accepted))) == draft[size_t(result.num_accepted)]) {
        ++result.num_accepted;
    }
    result.next_token = argmax(row(size_t(result.num_accepted)));
    return result;
    // END SOLUTION
}

Verification verify_stochastic(std::span<const TokenId> draft, std::span<const float> target_probs,
                               std::span<const float> draft_probs, int64_t vocab_size,
                               const std::function<double()>& uniform) {
    check_sizes(draft, target_probs.size(), vocab_size);
    if (draft_probs.size() != draft.size() * size_t(vocab_size)) {
        throw Error("verify: the draft's distributions do not match its tokens");
    }
    // BEGIN SOLUTION lab06
    // HINT: for each draft d_i: p = row i of target_probs, q = row i of draft_probs
    // HINT: accept with probability min(1, p(d)/q(d)): compare uniform() * q(d) with p(d)
    // HINT: at the first rejection draw the next token from max(0, p - q) (draw_from
    // HINT: normalizes); if that is all zero (p = q up to rounding), draw from p instead
    // HINT: all K accepted: draw the bonus token from row K of target_probs
    const size_t vocab = size_t(vocab_size);
    Verification result;
    for (size_t i = 0; i < draft.size(); ++i) {
        const auto p = target_probs.subspan(i * vocab, vocab);
        const auto q = draft_probs.subspan(i * vocab, vocab);
        const size_t d = size_t(draft[i]);
        if (!(q[d] > 0.0f)) throw Error("verify: the draft gave its own token probability 0");
        // Accept with probability min(1, p/q): u < p/q, written without the division.
        if (uniform() * double(q[d]) < double(p[d])) {
            ++result.num_accepted;
            continue;
        }
        // Rejected: the next token comes from what p has beyond q.
        std::vector<float> residual(vocab);
        for (size_t t = 0; t < vocab; ++t) residual[t] = std::max(0.0f, p[t] - q[t]);
        // p = q up to rounding leaves no residual mass; then p itself is right.
        const bool empty =
            std::all_of(residual.begin(), residual.end(), [](float r) { return r <= 0.0f; });
        result.next_token = draw_from(empty ? p : std::span<const float>(residual), uniform());
        return result;
    }
    result.next_token = draw_from(target_probs.subspan(draft.size() * vocab, vocab), uniform());
    return result;
    // END SOLUTION
}

}  // namespace servelab
