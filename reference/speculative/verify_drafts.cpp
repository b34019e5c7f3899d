// verify_drafts.cpp — see verify_drafts.h.
#include "reference/speculative/verify_drafts.h"

#include <fmt/format.h>

#include "kernels/common/error.h"

namespace servelab {
namespace {

// (K, vocab) rows, row i all 0 except 1 at drafts[i]: the q of a drafter
// that proposes without drawing.
std::vector<float> point_mass_rows(std::span<const TokenId> drafts, int64_t vocab_size) {
    std::vector<float> rows(drafts.size() * size_t(vocab_size), 0.0f);
    for (size_t i = 0; i < drafts.size(); ++i) {
        if (drafts[i] < 0 || drafts[i] >= vocab_size) {
            throw Error("verify: a drafted token is outside the vocabulary");
        }
        rows[i * size_t(vocab_size) + size_t(drafts[i])] = 1.0f;
    }
    return rows;
}

}  // namespace

Verification verify_drafts(Sampler& sampler, std::span<const TokenId> history,
                           std::span<const TokenId> drafts, std::span<const float> draft_probs,
                           std::span<const float> target_logits, int64_t vocab_size,
                           std::span<const TokenBitmask> allowed) {
    const size_t vocab = size_t(vocab_size);
    const size_t num_rows = drafts.size() + 1;
    if (vocab_size < 1 || target_logits.size() != num_rows * vocab) {
        throw Error(fmt::format("verify: {} drafts need {} rows of target logits", drafts.size(),
                                num_rows));
    }
    if (!allowed.empty() && allowed.size() != num_rows) {
        throw Error(fmt::format("verify: {} drafts need {} grammar masks, got {}", drafts.size(),
                                num_rows, allowed.size()));
    }
    // p_i, as the Sampler would draw at position i: the penalty sees the
    // drafts before it, exactly as it would have seen them as real tokens,
    // and a constrained request's mask is its grammar's after them.
    std::vector<float> target_probs(num_rows * vocab);
    std::vector<float> row(vocab);
    std::vector<float> row_probs;
    std::vector<TokenId> seen(history.begin(), history.end());
    for (size_t i = 0; i < num_rows; ++i) {
        row.assign(target_logits.begin() + std::ptrdiff_t(i * vocab),
                   target_logits.begin() + std::ptrdiff_t((i + 1) * vocab));
        sampler.distribution(row, seen, row_probs, allowed.empty() ? nullptr : &allowed[i]);
        std::copy(row_probs.begin(), row_probs.end(),
                  target_probs.begin() + std::ptrdiff_t(i * vocab));
        if (i < drafts.size()) seen.push_back(drafts[i]);
    }
    // Greedy: each p_i is one-hot on the target's choice, so verify_greedy's
    // argmax picks exactly the token greedy decoding would.
    if (sampler.params().temperature == 0.0f) {
        return verify_greedy(drafts, target_probs, vocab_size);
    }
    const std::vector<float> point_masses =
        draft_probs.empty() ? point_mass_rows(drafts, vocab_size) : std::vector<float>{};
    return verify_stochastic(
        drafts, target_probs,
        draft_probs.empty() ? std::span<const float>(point_masses) : draft_probs, vocab_size,
        [&] { return sampler.next_uniform(); });
}

}  // namespace servelab
