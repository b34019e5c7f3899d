// speculative_test.cpp — the parts of speculative decoding that need no model (Lab 6).
//
// Chapter 11.6. Verification (reference/speculative/rejection_sampler.h):
// greedy keeps exactly the drafts the target's argmax agrees with; the
// stochastic rule emits every token distributed as the target's p, whatever
// the draft's q — checked by a chi-square test per position over 200,000
// seeded verifications on a 5-token vocabulary, and shown to have the power
// to catch the classic bug (drawing the correction from p instead of the
// residual max(0, p - q)). The n-gram proposer and the block table's
// rollback are tested as plain functions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>

#include "kernels/common/error.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/block_table.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/speculative/ngram_proposer.h"
#include "reference/speculative/rejection_sampler.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

TEST(VerifyGreedy, KeepsTheDraftsTheArgmaxAgreesWithThenCorrects) {
    const int64_t vocab = 4;
    // Row i's argmax: 2, 1, 3, 0.
    const std::vector<float> logits = {0,      1, 5, 2, /**/ 0, 7, 1, 1,
                                       /**/ 1, 1, 1, 9, /**/ 3, 2, 1, 0};
    const std::vector<TokenId> all_right = {2, 1, 3};
    EXPECT_EQ(verify_greedy(all_right, logits, vocab).num_accepted, 3);
    const TokenId bonus = verify_greedy(all_right, logits, vocab).next_token;
    EXPECT_EQ(bonus, 0) << "every draft matched: the bonus token is the argmax of row K (the row "
                        << "after the last draft), 0"
                        << (bonus == 3 ? "; 3 is the argmax of the last draft's row" : "");
    const std::vector<TokenId> second_wrong = {2, 0, 3};
    const Verification v = verify_greedy(second_wrong, logits, vocab);
    EXPECT_EQ(v.num_accepted, 1);
    EXPECT_EQ(v.next_token, 1);  // the target's own choice at the mismatch
    const std::vector<TokenId> first_wrong = {3, 1, 3};
    EXPECT_EQ(verify_greedy(first_wrong, logits, vocab).num_accepted, 0);
    EXPECT_EQ(verify_greedy(first_wrong, logits, vocab).next_token, 2);
    EXPECT_THROW(verify_greedy(all_right, std::span(logits).first(12), vocab), Error);
}

// Random distributions over `vocab` tokens, every entry at least 0.02.
std::vector<float> random_distributions(int64_t rows, int64_t vocab, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(0.02f, 1.0f);
    std::vector<float> out;
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> row(static_cast<size_t>(vocab));
        float total = 0;
        for (float& v : row) total += (v = u(rng) * u(rng));  // uneven: some tokens much likelier
        for (float& v : row) out.push_back(v / total);
    }
    return out;
}

// The bug the test must catch: at a rejection, drawing from p itself.
Verification verify_with_residual_from_p(std::span<const TokenId> draft,
                                         std::span<const float> p_rows,
                                         std::span<const float> q_rows, int64_t vocab,
                                         const std::function<double()>& uniform) {
    for (size_t i = 0; i < draft.size(); ++i) {
        const auto p = p_rows.subspan(i * size_t(vocab), size_t(vocab));
        const auto q = q_rows.subspan(i * size_t(vocab), size_t(vocab));
        if (uniform() * q[size_t(draft[i])] < p[size_t(draft[i])]) continue;
        return {int64_t(i), draw_from(p, uniform())};
    }
    return {int64_t(draft.size()),
            draw_from(p_rows.subspan(draft.size() * size_t(vocab)), uniform())};
}

// The largest chi-square statistic, over positions 0..K, of the tokens
// emitted at that position against p_i.
template <typename Verify>
double worst_chi_square(const std::vector<float>& p, const std::vector<float>& q, int64_t k,
                        int64_t vocab, int64_t trials, std::mt19937_64& rng, Verify verify) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const std::function<double()> uniform = [&] { return unit(rng); };
    std::vector<std::vector<int64_t>> counts(size_t(k + 1), std::vector<int64_t>(size_t(vocab)));
    std::vector<TokenId> draft(static_cast<size_t>(k));
    for (int64_t t = 0; t < trials; ++t) {
        for (int64_t i = 0; i < k; ++i) {  // d_i ~ q_i
            draft[size_t(i)] =
                draw_from(std::span(q).subspan(size_t(i * vocab), size_t(vocab)), unit(rng));
        }
        const Verification v = verify(draft, p, q, vocab, uniform);
        for (int64_t i = 0; i < v.num_accepted; ++i) ++counts[size_t(i)][size_t(draft[size_t(i)])];
        ++counts[size_t(v.num_accepted)][size_t(v.next_token)];
    }
    double worst = 0;
    for (int64_t i = 0; i <= k; ++i) {
        int64_t n = 0;
        for (int64_t c : counts[size_t(i)]) n += c;
        if (n < 1000) continue;  // too few reached this position to judge
        double chi = 0;
        for (int64_t tok = 0; tok < vocab; ++tok) {
            const double expected = double(n) * p[size_t(i * vocab + tok)];
            const double diff = double(counts[size_t(i)][size_t(tok)]) - expected;
            chi += diff * diff / expected;
        }
        worst = std::max(worst, chi);
    }
    return worst;
}

// With 5 tokens a position's statistic has 4 degrees of freedom, for which
// P(chi2 > x) = exp(-x/2)(1 + x/2): P(> 45) < 4e-9 per position.
constexpr double kChiSquareLimit = 45.0;

// Fresh target and draft distributions for K = 3 drafts over 5 tokens.
class VerifyStochastic : public ::testing::Test {
  protected:
    static constexpr int64_t kVocab = 5, kK = 3, kTrials = 200000;
    test::RandomSource random_;
    std::mt19937_64 rng_{random_.seed()};
    const std::vector<float> p_ = random_distributions(kK + 1, kVocab, rng_);
    const std::vector<float> q_ = random_distributions(kK, kVocab, rng_);
};

TEST_F(VerifyStochastic, EveryEmittedTokenFollowsTheTargetDistribution) {
    SCOPED_TRACE(random_.trace());
    const double worst = worst_chi_square(p_, q_, kK, kVocab, kTrials, rng_, verify_stochastic);
    std::printf("worst chi-square %.1f (limit %.1f)\n", worst, kChiSquareLimit);
    EXPECT_LT(worst, kChiSquareLimit);
}

TEST_F(VerifyStochastic, TheTestCatchesACorrectionDrawnFromPInsteadOfTheResidual) {
    SCOPED_TRACE(random_.trace());
    const double worst =
        worst_chi_square(p_, q_, kK, kVocab, kTrials, rng_, verify_with_residual_from_p);
    std::printf("worst chi-square of the planted bug %.1f (limit %.1f)\n", worst, kChiSquareLimit);
    EXPECT_GT(worst, kChiSquareLimit);
}

// Verification with chosen uniform draws: each case fixes the random numbers
// so that the rule itself, not the statistics, decides the outcome.
std::function<double()> draws(std::vector<double> values) {
    auto next = std::make_shared<size_t>(0);
    return [values, next] { return values.at((*next)++); };
}

TEST(VerifyStochasticRules, ARejectionDrawsTheNextTokenFromTheResidual) {
    // One draft, token 0: q(0) = 0.6 > p(0) = 0.1. The first draw 0.5 rejects it
    // (0.5 * 0.6 >= 0.1); the residual max(0, p - q) is (0, 0.4, 0.1), and the
    // second draw 0.75 picks token 1 from it (0.375 < 0.4) where p would give 2.
    const std::vector<float> p = {0.1f, 0.6f, 0.3f, /* bonus row */ 0.3f, 0.3f, 0.4f};
    const std::vector<float> q = {0.6f, 0.2f, 0.2f};
    const std::vector<TokenId> draft = {0};
    const Verification v = verify_stochastic(draft, p, q, 3, draws({0.5, 0.75}));
    EXPECT_EQ(v.num_accepted, 0);
    EXPECT_EQ(v.next_token, 1)
        << (v.next_token == draw_from(std::span(p).first(3), 0.75)
                ? "after the rejection the next token was drawn from p; it is drawn from the "
                  "residual max(0, p - q), normalized, which p's part already covered by q lacks"
                : "after the rejection the next token comes from the residual max(0, p - q)");
}

TEST(VerifyStochasticRules, ATokenTheTargetRulesOutIsNeverAccepted) {
    // p(0) = 0: accepted with probability min(1, 0 / q) = 0, even when the
    // uniform draw is exactly 0 (accept when u * q(d) < p(d), strictly).
    const std::vector<float> p = {0.0f, 1.0f, /* bonus row */ 0.5f, 0.5f};
    const std::vector<float> q = {1.0f, 0.0f};
    const std::vector<TokenId> draft = {0};
    const Verification v = verify_stochastic(draft, p, q, 2, draws({0.0, 0.0}));
    EXPECT_EQ(v.num_accepted, 0) << "the target gives the drafted token probability 0: it must "
                                    "never be accepted, not even when the draw is exactly 0";
    EXPECT_EQ(v.next_token, 1);
}

TEST(VerifyStochasticRules, AnEmptyResidualFallsBackToTheTarget) {
    // p <= q everywhere (p sums to 0.99 after rounding): the residual is all
    // zero, and the next token comes from p itself: 0.9 * 0.99 = 0.891 > 0.49.
    const std::vector<float> p = {0.49f, 0.5f, /* bonus row */ 0.5f, 0.5f};
    const std::vector<float> q = {0.5f, 0.5f};
    const std::vector<TokenId> draft = {0};
    const Verification v = verify_stochastic(draft, p, q, 2, draws({0.99, 0.9}));
    EXPECT_EQ(v.num_accepted, 0);
    EXPECT_EQ(v.next_token, 1) << "after a rejection with p <= q everywhere, max(0, p - q) is all "
                                  "zero: the next token is then drawn from p itself";
}

// The handout's rule for the random stream: one uniform per judged draft,
// then one for the correction or the bonus token, in that order, so that a
// seeded request draws the same numbers wherever it is verified.
TEST(VerifyStochasticRules, DrawsOneUniformPerJudgedDraftAndOneForTheNextToken) {
    // Two drafts (0, then 1); every draw is 0.
    const std::vector<float> same = {0.5f, 0.5f, 0.5f, 0.5f, /* bonus row */ 0.5f, 0.5f};
    const std::vector<float> q = {0.5f, 0.5f, 0.5f, 0.5f};
    const std::vector<TokenId> draft = {0, 1};
    int64_t calls = 0;
    const std::function<double()> counted = [&calls] {
        ++calls;
        return 0.0;
    };
    const Verification all = verify_stochastic(draft, same, q, 2, counted);
    ASSERT_EQ(all.num_accepted, 2);
    EXPECT_EQ(calls, 3) << "both drafts accepted took " << calls << " uniform draws: one per "
                        << "judged draft and one for the bonus token, 3 (not drawn up front, "
                        << "not one per vocabulary entry)";
    // p rules out the first draft: it is judged, the second is not.
    const std::vector<float> p = {0.0f, 1.0f, 0.5f, 0.5f, /* bonus row */ 0.5f, 0.5f};
    calls = 0;
    const Verification rejected = verify_stochastic(draft, p, q, 2, counted);
    ASSERT_EQ(rejected.num_accepted, 0);
    EXPECT_EQ(calls, 2) << "a rejection of the first of two drafts took " << calls
                        << " uniform draws: one for the judged draft and one for the "
                        << "correction, 2; a draft after the rejection is not judged";
}

TEST(VerifyStochasticRules, ADraftTheDraftModelRuledOutIsAnError) {
    const std::vector<float> p = {0.5f, 0.5f, 0.5f, 0.5f};
    const std::vector<float> q = {0.0f, 1.0f};
    const std::vector<TokenId> draft = {0};
    EXPECT_THROW(verify_stochastic(draft, p, q, 2, draws({0.5, 0.5})), Error)
        << "the draft gave its own token probability 0: q(d) > 0 is required (p / q)";
}

TEST(VerifyStochasticIdentity, AnIdenticalDraftIsAlwaysAccepted) {
    std::mt19937_64 rng(3);
    const int64_t vocab = 6, k = 4;
    const std::vector<float> q = random_distributions(k, vocab, rng);
    std::vector<float> p = q;
    const std::vector<float> last = random_distributions(1, vocab, rng);
    p.insert(p.end(), last.begin(), last.end());
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const std::function<double()> uniform = [&] { return unit(rng); };
    for (int t = 0; t < 100; ++t) {
        const std::vector<TokenId> draft = {0, 5, 2, 3};
        EXPECT_EQ(verify_stochastic(draft, p, q, vocab, uniform).num_accepted, k);
    }
}

// The two edges of the search: a suffix of length - 1 tokens has one earlier
// place to occur (position 0), and the latest earlier occurrence may start
// right before the suffix itself.
TEST(NgramProposer, SearchesEveryPlaceAnEarlierOccurrenceFits) {
    const std::vector<TokenId> constant = {4, 4, 4, 4};
    EXPECT_EQ(propose_ngram(constant, 2, {.max_n = 3, .min_n = 3}), (std::vector<TokenId>{4}))
        << "in 4 4 4 4 the 3-token suffix 4 4 4 also starts at position 0, so n = length - 1 = "
        << "3 matches and 4 follows it; n runs from min(max_n, length - 1) down";
    const std::vector<TokenId> overlapping = {7, 3, 3};
    EXPECT_EQ(propose_ngram(overlapping, 1), (std::vector<TokenId>{3}))
        << "in 7 3 3 the suffix 3 last occurred at position 1, right before the suffix: the "
        << "search for an earlier occurrence starts at length - n - 1";
}

TEST(NgramProposer, ContinuesTheLatestRepeatOfTheLongestSuffix) {
    // ... 7 8 9 1 2 ... 7 8 9 4 5 ... 8 9 | the suffix "8 9" last came before "4 5".
    const std::vector<TokenId> text = {7, 8, 9, 1, 2, 3, 7, 8, 9, 4, 5, 6, 8, 9};
    EXPECT_EQ(propose_ngram(text, 3), (std::vector<TokenId>{4, 5, 6}));
    EXPECT_EQ(propose_ngram(text, 1), (std::vector<TokenId>{4}));
    EXPECT_TRUE(propose_ngram(text, 0).empty());
    // A longer suffix wins over a more recent shorter one: "1 2 3" beats "3".
    const std::vector<TokenId> longer = {1, 2, 3, 10, 11, 3, 12, 1, 2, 3};
    EXPECT_EQ(propose_ngram(longer, 2), (std::vector<TokenId>{10, 11}));
    // The continuation stops at the end of the sequence.
    const std::vector<TokenId> end = {5, 6, 5};
    EXPECT_EQ(propose_ngram(end, 4), (std::vector<TokenId>{6, 5}));
    const std::vector<TokenId> none = {1, 2, 3, 4};
    EXPECT_TRUE(propose_ngram(none, 4).empty());
    EXPECT_TRUE(propose_ngram(std::vector<TokenId>{}, 4).empty());
    EXPECT_THROW(propose_ngram(text, -1), Error);
    EXPECT_THROW(propose_ngram(text, 2, {.max_n = 1, .min_n = 2}), Error);
}

TEST(BlockTableRollback, TruncateReleasesTheBlocksPastTheNewEnd) {
    BlockAllocator allocator(16);
    BlockTable table(4);
    for (int i = 0; i < 10; ++i) table.append_slot(allocator);  // 3 blocks
    ASSERT_EQ(allocator.num_free(), 13);
    table.truncate(5, allocator);
    EXPECT_EQ(table.num_tokens(), 5);
    EXPECT_EQ(table.blocks().size(), 2u)
        << "5 tokens in blocks of 4 need 2 blocks (the second holds token 4): truncate keeps "
           "ceil(num_tokens / block_size) blocks";
    EXPECT_EQ(allocator.num_free(), 14);
    table.truncate(4, allocator);  // a block boundary: the second block goes too
    EXPECT_EQ(table.blocks().size(), 1u);
    EXPECT_EQ(allocator.num_free(), 15);
    // Appending again reuses the slots: position 4 opens a fresh block.
    EXPECT_EQ(table.append_slot(allocator).slot.offset, 0);
    EXPECT_EQ(table.num_tokens(), 5);
    table.truncate(0, allocator);
    EXPECT_TRUE(table.blocks().empty());
    EXPECT_EQ(allocator.num_free(), 16);
    EXPECT_THROW(table.truncate(1, allocator), Error);
    EXPECT_THROW(table.truncate(-1, allocator), Error);
}

TEST(BlockTableRollback, ASharedPartlyKeptBlockIsCopiedOnTheNextWrite) {
    BlockAllocator allocator(16);
    BlockTable table(4);
    for (int i = 0; i < 7; ++i) table.append_slot(allocator);
    BlockTable fork = table.fork(allocator);
    table.truncate(6, allocator);  // its second block, shared with the fork, stays
    EXPECT_EQ(allocator.ref_count(table.blocks()[1]), 2);
    const AppendResult appended = table.append_slot(allocator);
    ASSERT_TRUE(appended.copy.has_value());  // the fork's tokens stay intact
    EXPECT_EQ(appended.copy->from, fork.blocks()[1]);
    EXPECT_EQ(fork.num_tokens(), 7);
}

TEST(KvRollback, ForgetsTokensHashesAndBlocksButNotWhatThePrefixCacheNamed) {
    for (const PrefixCacheKind kind : {PrefixCacheKind::kHash, PrefixCacheKind::kRadix}) {
        SCOPED_TRACE(prefix_cache_kind_name(kind));
        PagedKvCache pool(test::one_float_config(), 16, 4);
        KvBlockManager kv(pool, kind);
        const std::vector<TokenId> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
        PagedSequence seq = kv.start(tokens);
        ASSERT_TRUE(kv.reserve(seq, 10));
        kv.commit(seq, tokens);  // blocks 0 and 1 are full: named in the prefix cache
        ASSERT_EQ(seq.num_named_blocks, 2);
        const BlockId second = seq.table.blocks()[1];
        const BlockId third = seq.table.blocks()[2];

        kv.rollback(seq, 6);  // 2 verified tokens kept in the second block, 4 rejected
        EXPECT_EQ(seq.table.num_tokens(), 6);
        EXPECT_EQ(seq.num_computed_tokens, 6);
        EXPECT_EQ(seq.num_named_blocks, 1);
        EXPECT_EQ(pool.allocator().ref_count(third), 0);  // back in the pool
        EXPECT_TRUE(kv.prefix_cache()->contains(second));
        // The next write into the second block must not change what the cache
        // named: the block is shared with the cache, so it is copied first.
        ASSERT_TRUE(kv.reserve(seq, 1));
        EXPECT_NE(seq.table.blocks()[1], second);
        EXPECT_TRUE(kv.prefix_cache()->contains(second));
        kv.rollback(seq, 0);
        EXPECT_TRUE(seq.table.blocks().empty());
        EXPECT_THROW(kv.rollback(seq, 1), Error);
        kv.finish(seq);
    }
}

}  // namespace
}  // namespace servelab
