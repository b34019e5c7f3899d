// tiny_model_test.cpp — the tiny-model generator: deterministic, loadable, byte-level vocab.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kernels/common/error.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/model/unicode_categories.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

TEST(TinyModel, SameSeedSameBytesOtherSeedOtherBytes) {
    EXPECT_EQ(make_tiny_model({.seed = 3}), make_tiny_model({.seed = 3}));
    EXPECT_NE(make_tiny_model({.seed = 3}), make_tiny_model({.seed = 4}));
}

TEST(TinyModel, LoadsWithTheShapeAskedFor) {
    const auto bytes = make_tiny_model({.num_layers = 3,
                                        .dim = 48,
                                        .num_heads = 6,
                                        .num_kv_heads = 3,
                                        .ffn_dim = 40,
                                        .context_length = 99});
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    EXPECT_EQ(model.config.num_layers, 3);
    EXPECT_EQ(model.config.dim, 48);
    EXPECT_EQ(model.config.head_dim, 8);
    EXPECT_EQ(model.config.num_kv_heads, 3);
    EXPECT_EQ(model.config.ffn_dim, 40);
    EXPECT_EQ(model.config.context_length, 99);
    EXPECT_EQ(model.weights.layers.size(), 3u);
}

// Any valid UTF-8 text survives encode → decode through the byte-level
// vocabulary, and the merges are used. (Invalid UTF-8 becomes U+FFFD, as in
// llama.cpp, so random bytes would not round-trip.)
TEST(TinyModel, VocabularyRoundTripsArbitraryText) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    const auto bytes = make_tiny_model({});
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    std::string text;
    for (int i = 0; i < 200; ++i) {
        uint32_t cp = uint32_t(random.integer(1, 0x10FFFF));
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';         // surrogates are not characters
        if (i % 2) cp = uint32_t(random.integer(1, 0x7F));  // plenty of ASCII too
        append_utf8(text, cp);
    }
    EXPECT_EQ(model.tokenizer.decode(model.tokenizer.encode(text, false)), text);
    EXPECT_EQ(model.tokenizer.encode(" the", false).size(), 1u);  // "Ġt" + "he" → "Ġthe"
    EXPECT_TRUE(model.tokenizer.is_end_of_generation(model.tokenizer.find_token("<|im_end|>")));
}

// An added token is user-defined: one id for its whole text, both ways.
TEST(TinyModel, AddedTokensAreUserDefinedAndDecodeToTheirText) {
    TinyModelOptions options;
    options.user_tokens = {"<tool_call>{\"name\": \"f\"}</tool_call>", "[X]"};
    const Model model = Model::from_gguf(GgufFile::parse(make_tiny_model(options)));
    for (const std::string& text : options.user_tokens) {
        const TokenId id = model.tokenizer.find_token(text);
        ASSERT_GE(id, 0) << text;
        EXPECT_EQ(model.tokenizer.token_type(id), TokenType::kUserDefined);
        EXPECT_EQ(model.tokenizer.decode(std::vector<TokenId>{id}), text);
        EXPECT_EQ(model.tokenizer.encode("a" + text, false).back(), id);
    }
    options.user_tokens = {"[X]", "[X]"};
    EXPECT_THAT(test::error_of([&] { make_tiny_model(options); }),
                ::testing::HasSubstr("added token"));
}

TEST(TinyModel, RejectsUnknownWeightType) {
    EXPECT_EQ(parse_weight_type("q4_1"), GgmlType::kQ4_1);
    EXPECT_THAT(test::error_of([] { parse_weight_type("q5_k"); }),
                ::testing::HasSubstr("unknown weight type 'q5_k'"));
}

}  // namespace
}  // namespace servelab
