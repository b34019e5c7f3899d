// perplexity_test.cpp — `servelab perplexity`'s pieces: the windows, the NLL, the KL, the sums.
//
// The windows follow llama-perplexity's scheme (perplexity_windows.h), so the
// plan is checked against its counts; the per-token numbers against direct
// computations in long double; score_windows against running the windows by
// hand on a tiny model. The agreement with llama.cpp itself, on SmolLM2 and a
// file `servelab quantize` wrote, is tests/e2e/test_quant_llamacpp.py.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "reference/engine/model_runner.h"
#include "reference/eval/kl_summary.h"
#include "reference/eval/log_softmax.h"
#include "reference/eval/next_token_kl.h"
#include "reference/eval/perplexity.h"
#include "reference/eval/perplexity_windows.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

TEST(PerplexityWindows, TheDefaultScoresTheSecondHalfOfEachWindow) {
    // llama-perplexity -c 128 over 1,000 tokens: 7 chunks, 63 predictions each.
    const PerplexityWindowPlan plan = plan_perplexity_windows(1000, 128, 0);
    ASSERT_EQ(plan.windows.size(), 7u);
    EXPECT_EQ(plan.stride_tokens, 128);
    for (size_t i = 0; i < plan.windows.size(); ++i) {
        EXPECT_EQ(plan.windows[i].start_token, int64_t(i) * 128);
        EXPECT_EQ(plan.windows[i].first_scored_row, 64);
        EXPECT_EQ(plan.windows[i].num_scored, 63);
    }
    EXPECT_EQ(plan.num_scored_total(), 7 * 63);
    EXPECT_EQ(plan_perplexity_windows(1000, 128, 0, 3).windows.size(), 3u) << "--chunks 3";
    EXPECT_EQ(plan_perplexity_windows(1000, 128, 0, 50).windows.size(), 7u)
        << "--chunks beyond the text: all that fit";
}

TEST(PerplexityWindows, AStrideScoresEveryTokenOnceAfterTheFirstWindow) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 20; ++trial) {
        const int64_t context = random.integer(3, 200);
        const int64_t stride = random.integer(1, context - 1);
        const int64_t tokens = context + random.integer(0, 600);
        const PerplexityWindowPlan plan = plan_perplexity_windows(tokens, context, stride);
        ASSERT_EQ(int64_t(plan.windows.size()), (tokens - context) / stride + 1);
        std::set<int64_t> scored;  // text positions predicted
        for (const PerplexityWindow& w : plan.windows) {
            ASSERT_EQ(w.first_scored_row, context - stride - 1);
            ASSERT_EQ(w.num_scored, stride);
            for (int64_t r = w.first_scored_row; r < w.first_scored_row + w.num_scored; ++r) {
                const int64_t target = w.start_token + r + 1;
                ASSERT_LT(target, tokens) << "a window never predicts past the text";
                ASSERT_TRUE(scored.insert(target).second) << "token " << target << " scored twice";
                ASSERT_GE(r + 1, context - stride)
                    << "every prediction has N − S tokens of context";
            }
        }
        // Consecutive: the windows leave no gap between their scored spans.
        ASSERT_EQ(*scored.rbegin() - *scored.begin() + 1, int64_t(scored.size()));
    }
}

TEST(PerplexityWindows, ImpossiblePlansSayWhatIsNeeded) {
    EXPECT_NE(test::error_of([] { plan_perplexity_windows(100, 2, 0); }).find("at least 3"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { plan_perplexity_windows(100, 16, 17); }).find("--stride"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { plan_perplexity_windows(100, 128, 0); }).find("100 tokens"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { plan_perplexity_windows(500, 128, 0, -1); }).find("--chunks"),
              std::string::npos);
}

// −log softmax in long double, the plain way.
long double direct_nll(const std::vector<float>& logits, size_t target) {
    long double max = logits[0];
    for (float v : logits) max = std::max<long double>(max, v);
    long double sum = 0;
    for (float v : logits) sum += std::exp((long double)v - max);
    return -((long double)logits[target] - max - std::log(sum));
}

TEST(LogSoftmax, NllEqualsTheDirectSumForLargeAndSmallLogits) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (float spread : {1.0f, 30.0f}) {
        std::vector<float> logits = random.normal(49152, spread);
        logits[17] += 200.0f;  // exp(200) overflows float: the shift by the max must be there
        for (size_t target : {size_t(17), size_t(3), size_t(40000)}) {
            const double got = token_nll(logits, int64_t(target));
            ASSERT_TRUE(std::isfinite(got));
            EXPECT_NEAR(got, double(direct_nll(logits, target)),
                        1e-9 * std::max(1.0, std::fabs(got)));
        }
    }
}

TEST(NextTokenKl, IsZeroForEqualRowsAndTheDirectSumOtherwise) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<float> p0 = random.normal(1000, 3.0f);
    EXPECT_EQ(kl_divergence(p0, p0), 0.0);
    std::vector<float> shifted = p0;
    for (float& v : shifted) v += 4.0f;  // the same distribution
    EXPECT_NEAR(kl_divergence(p0, shifted), 0.0, 1e-12);

    const std::vector<float> p = random.normal(1000, 3.0f);
    long double lse0 = 0, lse = 0, m0 = -1e30L, m = -1e30L;
    for (size_t i = 0; i < p0.size(); ++i) {
        m0 = std::max<long double>(m0, p0[i]);
        m = std::max<long double>(m, p[i]);
    }
    for (size_t i = 0; i < p0.size(); ++i) {
        lse0 += std::exp((long double)p0[i] - m0);
        lse += std::exp((long double)p[i] - m);
    }
    lse0 = m0 + std::log(lse0);
    lse = m + std::log(lse);
    long double kl = 0;
    for (size_t i = 0; i < p0.size(); ++i) {
        const long double log_p0 = p0[i] - lse0, log_p = p[i] - lse;
        kl += std::exp(log_p0) * (log_p0 - log_p);
    }
    EXPECT_NEAR(kl_divergence(p0, p), double(kl), 1e-9 * double(kl));
    EXPECT_NE(kl_divergence(p0, p), kl_divergence(p, p0)) << "KL is not symmetric: P0 first";
}

TEST(KlSummary, PercentilesInterpolateBetweenRanks) {
    KlSummary summary;
    EXPECT_EQ(summary.mean_nats(), 0.0);
    EXPECT_EQ(summary.p99_nats(), 0.0);
    for (double v : {0.4, 0.1, 0.3, 0.2, 1.0}) summary.add(v, v < 0.35);
    EXPECT_DOUBLE_EQ(summary.mean_nats(), 0.4);
    EXPECT_DOUBLE_EQ(summary.median_nats(), 0.3);
    EXPECT_DOUBLE_EQ(summary.max_nats(), 1.0);
    // Rank 0.99 · 4 = 3.96: between 0.4 and 1.0.
    EXPECT_NEAR(summary.p99_nats(), 0.4 + 0.96 * 0.6, 1e-12);
    EXPECT_DOUBLE_EQ(summary.top1_agreement(), 0.6);
}

TEST(NllSum, StandardErrorIsTheDeltaMethodsOfTheMean) {
    NllSum sum;
    const std::vector<double> nll = {1.0, 2.0, 4.0, 3.0};
    for (double v : nll) sum.add(v);
    const double mean = 2.5, variance = (1 + 4 + 16 + 9) / 4.0 - mean * mean;
    EXPECT_DOUBLE_EQ(sum.perplexity(), std::exp(mean));
    EXPECT_NEAR(sum.perplexity_stderr(), std::exp(mean) * std::sqrt(variance / 3.0), 1e-12);
}

// score_windows against the windows run by hand, on a tiny model, with a
// reference model that differs (another seed) and one that is the same.
TEST(ScoreWindows, EqualsTheWindowsRunByHand) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    TinyModelOptions options;
    options.seed = uint64_t(random.integer(1, 1 << 30));
    const std::vector<uint8_t> bytes = make_tiny_model(options);  // the models read them
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    options.seed += 1;
    const std::vector<uint8_t> other_bytes = make_tiny_model(options);
    const Model other = Model::from_gguf(GgufFile::parse(other_bytes));
    std::vector<TokenId> text(300);
    for (TokenId& t : text) t = TokenId(random.integer(0, model.config.vocab_size - 1));
    const PerplexityWindowPlan plan = plan_perplexity_windows(int64_t(text.size()), 64, 24);

    ModelRunner runner(model.config, model.weights);
    ModelRunner reference(other.config, other.weights);
    ModelRunner same(model.config, model.weights);
    const PerplexityScores scores = score_windows(runner, &reference, text, plan, -1);
    const PerplexityScores self = score_windows(runner, &same, text, plan, -1);

    double sum = 0.0, reference_sum = 0.0;
    int64_t count = 0;
    ModelRunner by_hand(model.config, model.weights);
    ModelRunner reference_by_hand(other.config, other.weights);
    for (const PerplexityWindow& w : plan.windows) {
        const std::vector<TokenId> tokens(text.begin() + w.start_token,
                                          text.begin() + w.start_token + plan.context_tokens);
        const std::vector<float> logits = by_hand.forward({tokens, 0, LogitsFor::kAllTokens});
        const std::vector<float> ref_logits =
            reference_by_hand.forward({tokens, 0, LogitsFor::kAllTokens});
        const size_t vocab = size_t(model.config.vocab_size);
        for (int64_t r = w.first_scored_row; r < w.first_scored_row + w.num_scored; ++r) {
            const TokenId target = text[size_t(w.start_token + r + 1)];
            sum += token_nll({logits.data() + size_t(r) * vocab, vocab}, target);
            reference_sum += token_nll({ref_logits.data() + size_t(r) * vocab, vocab}, target);
            ++count;
        }
    }
    ASSERT_EQ(scores.nll.count, count);
    EXPECT_NEAR(scores.nll.mean_nats(), sum / double(count), 1e-9);
    EXPECT_NEAR(scores.reference_nll.mean_nats(), reference_sum / double(count), 1e-9);
    EXPECT_GT(scores.kl.mean_nats(), 0.0) << "two different models";
    EXPECT_NEAR(self.kl.mean_nats(), 0.0, 1e-12) << "a model against itself";
    EXPECT_DOUBLE_EQ(self.kl.top1_agreement(), 1.0);

    // A window BOS replaces token 0 of each window, and only that.
    const std::vector<TokenId> with_bos = window_tokens(text, plan.windows[1], 64, 7);
    EXPECT_EQ(with_bos[0], 7);
    EXPECT_EQ(with_bos[1], text[size_t(plan.windows[1].start_token + 1)]);
}

}  // namespace
}  // namespace servelab
