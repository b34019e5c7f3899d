// runner_generate_test.cpp — Lab 1's and Lab 2's decoding rebuilt on a StepRunner's paged pool.
//
// Issue 7: the GPU has only a paged pool, so its naive and contiguous modes
// (reference/engine/runner_generate.h) build those layouts from pools. On
// the CPU runner they must give exactly generate()'s tokens: naive against
// generate() without a cache, contiguous against generate() on Lab 2's
// KvCache, greedy and sampled, for block sizes that do and do not divide
// the lengths.
#include <gtest/gtest.h>

#include "reference/common/error.h"
#include "reference/engine/runner_generate.h"
#include "tests/unit/engine_test_util.h"

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
        const GenerationResult contiguous_want = solo(prompt, params);
        for (int64_t block_size : {1, 5, 16}) {
            SCOPED_TRACE("block size " + std::to_string(block_size));
            const GenerationResult naive = generate_on_runner(*runner_, *model_, prompt, params,
                                                              RunnerLayout::kNaive, block_size);
            EXPECT_EQ(naive.tokens, naive_want.tokens);
            EXPECT_EQ(naive.text, naive_want.text);
            const GenerationResult contiguous = generate_on_runner(
                *runner_, *model_, prompt, params, RunnerLayout::kContiguous, block_size);
            EXPECT_EQ(contiguous.tokens, contiguous_want.tokens);
            EXPECT_EQ(contiguous.finish_reason, contiguous_want.finish_reason);
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
