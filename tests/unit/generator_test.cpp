// generator_test.cpp — naive generation: stop conditions, seeds, context limit, streaming.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/common/error.h"
#include "reference/engine/generator.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/sampling/sampler.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

class GeneratorTest : public ::testing::Test {
  protected:
    void SetUp() override {
        bytes_ = make_tiny_model({.seed = random_.seed(), .context_length = 64});
        model_ = std::make_unique<Model>(Model::from_gguf(GgufFile::parse(bytes_)));
        runner_ = std::make_unique<ModelRunner>(model_->config, model_->weights);
        prompt_ = model_->tokenizer.encode("the cat sat on", false);
    }
    GenerationResult run(const SamplingParams& params, const TokenCallback& cb = {}) {
        return generate(*runner_, model_->config, model_->tokenizer, prompt_, params, cb);
    }

    RandomSource random_;
    std::vector<uint8_t> bytes_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<ModelRunner> runner_;
    std::vector<TokenId> prompt_;
};

TEST_F(GeneratorTest, GreedyTokensAreArgmaxOfFullRecompute) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 6;
    params.ignore_eos = true;
    const GenerationResult result = run(params);
    ASSERT_EQ(result.tokens.size(), 6u);
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
    std::vector<TokenId> sequence = prompt_;
    for (TokenId token : result.tokens) {
        EXPECT_EQ(token, argmax(runner_->forward({sequence, 0})));
        sequence.push_back(token);
    }
    EXPECT_EQ(result.timings.step_latency_ms.size(), 6u);
    EXPECT_EQ(result.timings.first_step_ms, result.timings.step_latency_ms.front())
        << "timings.first_step_ms is the latency of the first step (the prefill)";
}

// The loop by its definition: each step computes the logits of the whole
// sequence so far, samples from them, and appends the token; with the same
// seed the generator must give the same tokens. A loop that never appends
// samples every token from the prompt's logits: that is checked separately so
// that the message can say so.
TEST_F(GeneratorTest, SampledTokensEqualTheLoopOverTheGrowingSequence) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 10;
    params.ignore_eos = true;
    params.temperature = 1.5f;
    params.seed = random_.seed();
    const GenerationResult result = run(params);
    const auto loop = [&](bool append) {
        Sampler sampler(params);
        std::vector<TokenId> sequence = prompt_, tokens;
        for (int32_t i = 0; i < params.max_tokens; ++i) {
            std::vector<float> logits = runner_->forward({sequence, 0});
            const TokenId token = sampler.sample(logits, sequence);
            tokens.push_back(token);
            if (append) sequence.push_back(token);
        }
        return tokens;
    };
    const std::vector<TokenId> expected = loop(true);
    if (result.tokens != expected && result.tokens == loop(false)) {
        ADD_FAILURE() << "every token was sampled from the prompt's logits: the sampled token is "
                         "never appended to the sequence, so each step sees the prompt alone";
    }
    EXPECT_EQ(result.tokens, expected)
        << "the tokens differ from forward(sequence so far) -> sample -> append, step by step";
}

TEST_F(GeneratorTest, SeededSamplingIsReproducible) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.temperature = 1.5f;
    params.max_tokens = 12;
    params.ignore_eos = true;
    params.seed = random_.seed();
    const auto a = run(params), b = run(params);
    EXPECT_EQ(a.tokens, b.tokens);
    params.seed += 1;
    const auto c = run(params);
    EXPECT_NE(a.tokens, c.tokens);
}

TEST_F(GeneratorTest, StopsAtStopTokenAndIncludesIt) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 8;
    params.ignore_eos = true;
    const auto free_run = run(params);
    params.stop_token_ids = {free_run.tokens[2]};
    const auto stopped = run(params);
    // It stops at the first occurrence, which may be before index 2.
    ASSERT_LE(stopped.tokens.size(), 3u);
    EXPECT_EQ(stopped.tokens.back(), free_run.tokens[2]);
    EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
}

TEST_F(GeneratorTest, MinTokensHoldsStopTokensBackUntilReached) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 8;
    params.ignore_eos = true;
    const auto free_run = run(params);
    // Every generated token is a stop token: without min_tokens the request
    // would end after one token.
    params.stop_token_ids = free_run.tokens;
    params.min_tokens = 5;
    const auto held = run(params);
    EXPECT_EQ(held.tokens.size(), 6u) << "tokens 1..5 may not stop, the 6th may";
    EXPECT_EQ(held.finish_reason, FinishReason::kStop);
    params.min_tokens = params.max_tokens;
    const auto full = run(params);
    EXPECT_EQ(full.tokens, free_run.tokens);
    EXPECT_EQ(full.finish_reason, FinishReason::kLength);
}

TEST_F(GeneratorTest, StopStringTruncatesTextAndStreamMatches) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 20;
    params.ignore_eos = true;
    params.temperature = 1.0f;
    params.seed = random_.seed();
    const auto free_run = run(params);
    ASSERT_GE(free_run.text.size(), 4u);
    // A stop string taken from the middle of the free-running output.
    const size_t cut = free_run.text.size() / 2;
    params.stop_strings = {free_run.text.substr(cut, 2)};
    std::string streamed;
    const auto stopped = run(params, [&](TokenId, const std::string& piece) { streamed += piece; });
    EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
    EXPECT_EQ(stopped.text, free_run.text.substr(0, free_run.text.find(params.stop_strings[0])));
    EXPECT_EQ(streamed, stopped.text);
}

TEST_F(GeneratorTest, StreamedPiecesConcatenateToText) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 15;
    params.temperature = 1.0f;
    params.seed = random_.seed();
    std::string streamed;
    int calls = 0;
    const auto result = run(params, [&](TokenId, const std::string& piece) {
        streamed += piece;
        ++calls;
    });
    EXPECT_EQ(streamed, result.text);
    EXPECT_EQ(size_t(calls), result.tokens.size());
}

TEST_F(GeneratorTest, EndsWithLengthAtContextLimit) {
    SamplingParams params;
    params.max_tokens = 1000;
    params.ignore_eos = true;
    const auto result = run(params);
    EXPECT_EQ(result.prompt_tokens.size() + result.tokens.size(), 64u);
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
}

// At the context limit the stop checker may still hold text back (the end of
// the output could be the start of a stop string); ending there must stream
// it too, so that the streamed pieces add up to the text.
TEST_F(GeneratorTest, EndingAtTheContextLimitStreamsTheHeldBackText) {
    SCOPED_TRACE(random_.trace());
    SamplingParams params;
    params.max_tokens = 1000;
    params.ignore_eos = true;
    const auto free_run = run(params);
    ASSERT_GE(free_run.text.size(), 2u);
    // A stop string that starts with the output's last two bytes and never matches.
    params.stop_strings = {free_run.text.substr(free_run.text.size() - 2) + "\x01\x02\x03"};
    std::string streamed;
    const auto held = run(params, [&](TokenId, const std::string& piece) { streamed += piece; });
    EXPECT_EQ(held.finish_reason, FinishReason::kLength);
    EXPECT_EQ(held.text, free_run.text);
    EXPECT_EQ(streamed, held.text)
        << "the streamed pieces miss the text the stop checker held back at the end: when the "
           "sequence reaches the context, the loop must stream what stop.finish() returns";
}

TEST_F(GeneratorTest, RejectsEmptyAndOverlongPrompts) {
    const auto error_for = [&](const std::vector<TokenId>& prompt) {
        return test::error_of(
            [&] { generate(*runner_, model_->config, model_->tokenizer, prompt, {}); });
    };
    EXPECT_THAT(error_for({}), ::testing::HasSubstr("the prompt is empty"));
    EXPECT_THAT(error_for(std::vector<TokenId>(64, 5)),
                ::testing::HasSubstr("prompt of 64 tokens does not fit the context length 64"));
}

}  // namespace
}  // namespace servelab
