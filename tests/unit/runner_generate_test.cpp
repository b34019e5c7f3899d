// runner_generate_test.cpp — Lab 1's and Lab 2's decoding rebuilt on a StepRunner's paged pool.
//
// The GPU has only a paged pool, so its naive and contiguous modes
// (reference/engine/runner_generate.h) build those layouts from pools. On
// the CPU runner they must give generate()'s tokens up to rounding (the
// pool's attention is another kernel): naive against generate() without a
// cache, contiguous against generate() on Lab 2's KvCache, greedy and
// sampled, for block sizes that do and do not divide the lengths; and
// exactly each other's tokens, whatever the block size.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "kernels/common/error.h"
#include "reference/engine/runner_generate.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/tokens_up_to_rounding.h"

namespace servelab {
namespace {

class RunnerGenerate : public test::TinyModelTest {
  protected:
    void SetUp() override { load_tiny_model({.num_heads = 4, .num_kv_heads = 2}); }
};

TEST_F(RunnerGenerate, NaiveAndContiguousGiveGeneratesTokens) {
    SCOPED_TRACE(random_.trace());
    for (const float temperature : {0.0f, 0.8f}) {
        SamplingParams params;
        params.temperature = temperature;
        params.top_k = 40;
        params.seed = uint64_t(random_.integer(0, 1 << 30));
        params.max_tokens = 12;
        params.ignore_eos = true;
        const std::vector<TokenId> prompt = random_prompt(random_.integer(1, 30));
        const GenerationResult naive_want =
            generate(*runner_, model_->config, model_->tokenizer, prompt, params, {}, nullptr);
        const GenerationResult contiguous_want = contiguous_solo(prompt, params);
        for (int64_t block_size : {1, 5, 16}) {
            SCOPED_TRACE("block size " + std::to_string(block_size));
            // The pool's attention is another kernel than generate()'s: the
            // same tokens up to rounding (tokens_up_to_rounding.h).
            const GenerationResult naive = generate_on_runner(*runner_, *model_, prompt, params,
                                                              RunnerLayout::kNaive, block_size);
            test::expect_same_tokens_up_to_rounding(
                *model_, prompt, params, test::AttentionPath::kPaged, naive.tokens,
                test::AttentionPath::kNoCache, naive_want.tokens);
            if (naive.tokens == naive_want.tokens) EXPECT_EQ(naive.text, naive_want.text);
            const GenerationResult contiguous = generate_on_runner(
                *runner_, *model_, prompt, params, RunnerLayout::kContiguous, block_size);
            test::expect_same_tokens_up_to_rounding(
                *model_, prompt, params, test::AttentionPath::kPaged, contiguous.tokens,
                test::AttentionPath::kContiguous, contiguous_want.tokens);
            EXPECT_EQ(contiguous.finish_reason, contiguous_want.finish_reason);
            // The pool's own path, though, gives the same bits for any block size.
            EXPECT_EQ(contiguous.tokens, naive.tokens);
        }
    }
}

TEST_F(RunnerGenerate, NaiveRecomputesEverySequenceWhileContiguousComputesEachTokenOnce) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 6;
    params.ignore_eos = true;
    const std::vector<TokenId> prompt = random_prompt(10);
    int64_t before = runner_->num_tokens_computed();
    generate_on_runner(*runner_, *model_, prompt, params, RunnerLayout::kNaive, 4);
    EXPECT_EQ(runner_->num_tokens_computed() - before, 10 + 11 + 12 + 13 + 14 + 15);
    before = runner_->num_tokens_computed();
    generate_on_runner(*runner_, *model_, prompt, params, RunnerLayout::kContiguous, 4);
    EXPECT_EQ(runner_->num_tokens_computed() - before, 10 + 5);
}

// The check above must be able to fail: a run whose token its own path's
// logits do not give is not explained by rounding.
TEST_F(RunnerGenerate, TheRoundingCheckRejectsATokenTheLogitsDoNotGive) {
    SCOPED_TRACE(random_.trace());
    SamplingParams greedy;
    greedy.max_tokens = 6;
    greedy.ignore_eos = true;
    const std::vector<TokenId> prompt = random_prompt(random_.integer(1, 20));
    const std::vector<TokenId> honest = contiguous_solo(prompt, greedy).tokens;
    std::vector<TokenId> forged = honest;
    forged[2] = TokenId((forged[2] + 1) % model_->config.vocab_size);
    ::testing::TestPartResultArray failures;
    {
        const ::testing::ScopedFakeTestPartResultReporter intercept(
            ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
        test::expect_same_tokens_up_to_rounding(*model_, prompt, greedy,
                                                test::AttentionPath::kPaged, forged,
                                                test::AttentionPath::kContiguous, honest);
    }
    ASSERT_EQ(failures.size(), 1);
    EXPECT_NE(std::string(failures.GetTestPartResult(0).message())
                  .find("replaying the sampler on the paged cache's logits does not give its "
                        "run's output token 2"),
              std::string::npos)
        << failures.GetTestPartResult(0).message();
}

TEST_F(RunnerGenerate, RejectsBadPrompts) {
    SamplingParams params;
    EXPECT_THROW(generate_on_runner(*runner_, *model_, {}, params, RunnerLayout::kNaive, 4), Error);
    const std::vector<TokenId> outside = {TokenId(model_->config.vocab_size)};
    EXPECT_THROW(generate_on_runner(*runner_, *model_, outside, params, RunnerLayout::kNaive, 4),
                 Error);
    const std::vector<TokenId> too_long(size_t(model_->config.context_length), 1);
    EXPECT_THROW(
        generate_on_runner(*runner_, *model_, too_long, params, RunnerLayout::kContiguous, 4),
        Error);
}

}  // namespace
}  // namespace servelab
