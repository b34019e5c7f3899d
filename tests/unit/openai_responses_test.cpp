// openai_responses_test.cpp — the logprobs objects in both of OpenAI's shapes.
//
// Serving layer (chapter 11.7). Chat writes {"content": [{token, logprob,
// bytes, top_logprobs}]}; the legacy completions API writes parallel lists
// (tokens, token_logprobs, top_logprobs, text_offset). JSON has no
// infinity, and a token may be part of a UTF-8 character: both must still
// give a body every client parses.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "reference/server/openai_responses.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

class OpenAiResponsesTest : public test::TinyModelTest {
  protected:
    void SetUp() override { load_tiny_model(TinyModelOptions{}); }
    // A token that is one byte of a multi-byte character, alone.
    TokenId partial_character_token() const {
        for (TokenId id = 0; id < model_->config.vocab_size; ++id) {
            const std::string bytes = model_->tokenizer.token_to_bytes(id);
            if (bytes.size() == 1 && (unsigned char)bytes[0] >= 0xC2) return id;
        }
        return -1;
    }
    TokenId plain_token() const {
        for (TokenId id = 0; id < model_->config.vocab_size; ++id) {
            const std::string bytes = model_->tokenizer.token_to_bytes(id);
            if (bytes.size() >= 2 && (unsigned char)bytes[0] < 0x80) return id;
        }
        return -1;
    }
};

TEST_F(OpenAiResponsesTest, ChatShapeCarriesTokenLogprobBytesAndTopLogprobs) {
    const TokenId word = plain_token();
    const TokenId partial = partial_character_token();
    ASSERT_GE(word, 0);
    ASSERT_GE(partial, 0) << "the tiny model's byte tokens should include 0xC2..0xFF";
    const std::vector<SampledLogprobs> logprobs = {
        {{word, -0.25f}, {{word, -0.25f}, {partial, -INFINITY}}},
        {{partial, -3.0f}, {}},
    };
    const nlohmann::json body = logprobs_json(true, logprobs, model_->tokenizer);
    const nlohmann::json& content = body.at("content");
    ASSERT_EQ(content.size(), 2u);
    const std::string word_text = model_->tokenizer.token_to_bytes(word);
    EXPECT_EQ(content[0]["token"], word_text);
    EXPECT_DOUBLE_EQ(content[0]["logprob"].get<double>(), -0.25);
    EXPECT_EQ(content[0]["bytes"].size(), word_text.size());
    ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
    EXPECT_DOUBLE_EQ(content[0]["top_logprobs"][1]["logprob"].get<double>(), -9999.0)
        << "a dropped token's -infinity must be written as vLLM's -9999.0 (JSON has no inf)";
    const unsigned char byte = (unsigned char)model_->tokenizer.token_to_bytes(partial)[0];
    EXPECT_EQ(content[1]["token"], fmt::format("bytes:\\x{:02x}", byte))
        << "a token that is part of a character is not valid UTF-8 alone";
    EXPECT_EQ(content[1]["bytes"], nlohmann::json::array({int(byte)}));
    EXPECT_TRUE(content[1]["top_logprobs"].is_array());
    // The whole body must serialize without the replacement character.
    EXPECT_EQ(body.dump().find("\xEF\xBF\xBD"), std::string::npos);
}

TEST_F(OpenAiResponsesTest, CompletionsShapeHasParallelListsAndByteOffsets) {
    const TokenId word = plain_token();
    ASSERT_GE(word, 0);
    const std::string text = model_->tokenizer.token_to_bytes(word);
    const std::vector<SampledLogprobs> logprobs = {
        {{word, -0.5f}, {{word, -0.5f}}},
        {{word, -1.5f}, {{word, -1.5f}}},
    };
    const nlohmann::json body = logprobs_json(false, logprobs, model_->tokenizer, 10);
    EXPECT_EQ(body["tokens"], nlohmann::json::array({text, text}));
    EXPECT_EQ(body["token_logprobs"], nlohmann::json::array({-0.5, -1.5}));
    ASSERT_EQ(body["top_logprobs"].size(), 2u);
    EXPECT_DOUBLE_EQ(body["top_logprobs"][1][text].get<double>(), -1.5);
    EXPECT_EQ(body["text_offset"], nlohmann::json::array({10, 10 + int64_t(text.size())}))
        << "each offset is where the token's text begins";
}

TEST_F(OpenAiResponsesTest, AChoiceWithoutLogprobsSaysNull) {
    GenerationResult result;
    result.tokens = {plain_token()};
    result.text = "x";
    const ResponseHeader header{"cmpl-1", 0, "m", false};
    nlohmann::json body = completion_response(header, {result}, 3, model_->tokenizer);
    EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
    result.logprobs = {{{result.tokens[0], -0.1f}, {}}};
    body = completion_response(header, {result}, 3, model_->tokenizer);
    EXPECT_EQ(body["choices"][0]["logprobs"]["tokens"].size(), 1u);
}

TEST_F(OpenAiResponsesTest, UsageCountsThePromptsCachedTokensOnceForAllChoices) {
    std::vector<GenerationResult> results(3);
    for (GenerationResult& result : results) {
        result.tokens = {plain_token(), plain_token()};
        result.cached_prompt_tokens = 32;  // the siblings copy the first choice's count
    }
    const ResponseHeader header{"cmpl-2", 0, "m", false};
    const nlohmann::json usage =
        completion_response(header, results, 40, model_->tokenizer)["usage"];
    EXPECT_EQ(usage["prompt_tokens"], 40);
    EXPECT_EQ(usage["completion_tokens"], 6);
    EXPECT_EQ(usage["total_tokens"], 46);
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 32)
        << "n choices compute one prompt: its cached tokens count once";
    const nlohmann::json chunk = usage_chunk(header, 40, 6, 32);
    EXPECT_EQ(chunk["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
    EXPECT_TRUE(chunk["choices"].empty());
    EXPECT_EQ(usage_json(5, 1)["prompt_tokens_details"]["cached_tokens"], 0)
        << "every usage has the details, 0 when nothing was cached";
}

}  // namespace
}  // namespace servelab
