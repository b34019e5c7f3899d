// max_model_len_test.cpp — the longest request a server admits (chapter 11.7).
//
// `servelab serve --max-model-len N` caps prompt + output below the model's
// context, so that a KV pool smaller than one full context still holds every
// request it admits. The cap is one number read in three places that must
// agree: the front door (RequestBuilder) refuses and fills max_tokens by it,
// the engine's scheduler refuses by it, and a request that reaches it ends
// with finish reason "length".
#include <gtest/gtest.h>

#include "kernels/common/error.h"
#include "reference/engine/engine.h"
#include "reference/engine/request_builder.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

constexpr int64_t kModelContext = 128;

class MaxModelLenTest : public test::TinyModelTest {
  protected:
    void SetUp() override { load_tiny_model({.context_length = kModelContext}); }

    RequestSpec token_spec(int64_t prompt_tokens, int32_t max_tokens, bool given) {
        RequestSpec spec;
        spec.kind = RequestSpec::PromptKind::kTokenIds;
        spec.token_ids = random_prompt(prompt_tokens);
        spec.params.max_tokens = max_tokens;
        spec.params.ignore_eos = true;
        spec.max_tokens_given = given;
        return spec;
    }
};

TEST(CappedContextLength, IsTheModelsContextUnlessACapIsBelowIt) {
    ModelConfig config;
    config.context_length = 8192;
    EXPECT_EQ(capped_context_length(config, 0), 8192) << "0 means no cap";
    EXPECT_EQ(capped_context_length(config, 1024), 1024);
    EXPECT_EQ(capped_context_length(config, 2), 2);
    EXPECT_EQ(capped_context_length(config, 100000), 8192)
        << "a cap above the context must leave the context, not stretch it";
    for (const int64_t bad : {int64_t(1), int64_t(-5)}) {
        try {
            capped_context_length(config, bad);
            ADD_FAILURE() << "--max-model-len " << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--max-model-len"), std::string::npos)
                << "the error must name the flag: " << e.what();
        }
    }
}

TEST_F(MaxModelLenTest, TheFrontDoorRefusesAndFillsByTheCap) {
    const RequestBuilder capped(*model_, {.max_model_len = 40});
    const RequestBuilder uncapped(*model_);
    EXPECT_EQ(capped.context_length(), 40);
    EXPECT_EQ(uncapped.context_length(), kModelContext);
    // An unset max_tokens fills what the cap leaves, not what the model's context leaves.
    EXPECT_EQ(capped.build(token_spec(30, 1000, /*given=*/false)).params.max_tokens, 10);
    EXPECT_EQ(uncapped.build(token_spec(30, 1000, /*given=*/false)).params.max_tokens,
              kModelContext - 30);
    // A given one must fit under the cap.
    EXPECT_EQ(capped.build(token_spec(30, 10, /*given=*/true)).params.max_tokens, 10);
    try {
        capped.build(token_spec(30, 11, /*given=*/true));
        ADD_FAILURE() << "30 prompt tokens + max_tokens 11 passed a cap of 40";
    } catch (const RequestError& e) {
        EXPECT_EQ(e.param(), "max_tokens");
        EXPECT_EQ(e.code(), "context_length_exceeded");
    }
    // A prompt must leave one token of room under the cap.
    EXPECT_NO_THROW(capped.build(token_spec(39, 1, /*given=*/true)));
    EXPECT_THROW(capped.build(token_spec(40, 1, /*given=*/false)), RequestError);
}

TEST_F(MaxModelLenTest, TheEngineAdmitsAndEndsRequestsByTheCap) {
    EngineConfig config;
    config.scheduler.max_model_len = 40;
    config.num_kv_blocks = 3;  // 48 slots: room for one request of 40 tokens
    config.block_size = 16;
    Engine engine(*model_, *runner_, config);
    EXPECT_EQ(engine.context_length(), 40);
    SamplingParams params;
    params.max_tokens = 1000;  // more than the cap leaves: the request stops at the cap
    params.ignore_eos = true;
    EXPECT_THROW(engine.add_request(random_prompt(40), params), Error)
        << "a prompt with no room left under the cap was admitted";
    const std::vector<TokenId> prompt = random_prompt(30);
    const int64_t id = engine.add_request(prompt, params);
    GenerationResult result;
    while (engine.has_unfinished()) {
        for (FinishedRequest& f : engine.step().finished) {
            if (f.request_id == id) result = std::move(f.result);
        }
    }
    EXPECT_EQ(result.tokens.size(), 10u) << "the request did not end at the cap of 40 tokens";
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
    SamplingParams ten = params;
    ten.max_tokens = 10;
    EXPECT_EQ(result.tokens, solo(prompt, ten).tokens);
}

}  // namespace
}  // namespace servelab
