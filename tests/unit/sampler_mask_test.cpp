// sampler_mask_test.cpp — the grammar's mask in the Sampler (Lab 12, chapter 11.6).
//
// The mask comes first: a token the grammar forbids gets logit -infinity
// before the penalties, the bias, temperature and top-k/p, so nothing can
// bring it back, and the allowed tokens keep their relative odds (the
// distribution is the unconstrained one renormalized over them).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/sampling/sampler.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

TokenBitmask random_mask(test::RandomSource& random, int32_t vocab) {
    TokenBitmask mask(vocab);
    for (TokenId t = 0; t < vocab; ++t) {
        if (random.integer(0, 2) == 0) mask.set(t);
    }
    mask.set(TokenId(random.integer(0, vocab - 1)));  // never empty
    return mask;
}

TEST(SamplerMask, GreedyPicksTheBestAllowedTokenWhateverTheBias) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 50; ++trial) {
        const int32_t vocab = int32_t(random.integer(2, 300));
        const std::vector<float> logits = random.normal(size_t(vocab), 3.0f);
        const TokenBitmask mask = random_mask(random, vocab);
        TokenId best = -1;
        for (TokenId t = 0; t < vocab; ++t) {
            if (mask.test(t) && (best < 0 || logits[size_t(t)] > logits[size_t(best)])) best = t;
        }
        SamplingParams params;
        // A forbidden token with the largest bias and a penalty that would
        // otherwise make it the argmax: the mask still wins.
        std::vector<TokenId> history;  // the forbidden tokens: only they are boosted
        for (TokenId t = 0; t < vocab; ++t) {
            if (!mask.test(t)) {
                if (history.empty()) params.logit_bias.push_back({t, 100.0f});
                history.push_back(t);
            }
        }
        params.repetition_penalty = 0.5f;  // < 1 boosts the tokens in the history
        params.repetition_window = 0;
        std::vector<float> row = logits;
        EXPECT_EQ(Sampler(params).sample(row, history, nullptr, &mask), best)
            << "greedy under a mask must pick the best allowed token (the mask comes before "
               "the bias and the penalty)";
    }
}

TEST(SamplerMask, TheDistributionIsTheUnmaskedOneRenormalizedOverTheAllowedTokens) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 30; ++trial) {
        const int32_t vocab = int32_t(random.integer(2, 200));
        const std::vector<float> logits = random.normal(size_t(vocab), 2.0f);
        const TokenBitmask mask = random_mask(random, vocab);
        SamplingParams params;
        params.temperature = float(random.integer(5, 15)) / 10.0f;
        std::vector<float> row = logits;
        std::vector<float> probs;
        Sampler(params).distribution(row, {}, probs, &mask);
        double total = 0.0;
        for (TokenId t = 0; t < vocab; ++t) {
            if (!mask.test(t)) EXPECT_EQ(probs[size_t(t)], 0.0f) << "forbidden token " << t;
            total += probs[size_t(t)];
        }
        EXPECT_NEAR(total, 1.0, 1e-5);
        // Relative odds of two allowed tokens are exp((l_a - l_b) / T), as unmasked.
        TokenId a = -1, b = -1;
        for (TokenId t = 0; t < vocab; ++t) {
            if (mask.test(t)) (a < 0 ? a : b) = t;
            if (b >= 0) break;
        }
        if (b < 0) continue;
        const double expected =
            std::exp(double(logits[size_t(a)] - logits[size_t(b)]) / params.temperature);
        EXPECT_NEAR(double(probs[size_t(a)]) / double(probs[size_t(b)]), expected, 1e-3 * expected);
    }
}

TEST(SamplerMask, SampledTokensAreAlwaysAllowedAndForbiddenOnesHaveNoLogprob) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    const int32_t vocab = 64;
    const TokenBitmask mask = random_mask(random, vocab);
    SamplingParams params;
    params.temperature = 1.0f;
    params.top_k = 40;
    params.top_p = 0.95f;
    params.logprobs = 5;
    params.seed = uint64_t(random.integer(0, 1 << 30));
    Sampler sampler(params);
    for (int draw = 0; draw < 500; ++draw) {
        std::vector<float> row = random.normal(size_t(vocab), 4.0f);
        SampledLogprobs logprobs;
        const TokenId t = sampler.sample(row, {}, &logprobs, &mask);
        ASSERT_TRUE(mask.test(t)) << "draw " << draw << " sampled forbidden token " << t;
        for (const TokenLogprob& top : logprobs.top) {
            EXPECT_TRUE(mask.test(top.token)) << "a forbidden token among the top logprobs";
        }
    }
}

}  // namespace
}  // namespace servelab
