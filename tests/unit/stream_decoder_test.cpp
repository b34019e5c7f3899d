// stream_decoder_test.cpp — streamed output is always whole UTF-8 characters.
//
// Part of the model loader tests (all labs). A tiny vocabulary with one token
// per byte lets us split an emoji across four tokens on purpose; the real
// SmolLM2 vocabulary (when present) checks that streaming the tokens of mixed
// text reproduces decode() exactly.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"
#include "reference/model/stream_decoder.h"
#include "reference/model/tokenizer.h"
#include "reference/model/unicode_categories.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

// True when `s` is a sequence of complete, strictly valid UTF-8 characters.
bool is_valid_utf8(std::string_view s) {
    while (!s.empty()) {
        const int length = utf8_char_length(s);
        if (length <= 0) return false;
        s.remove_prefix(length);
    }
    return true;
}

// A vocabulary of one token per byte, in byte order, so token id == byte
// value: bytes 0..255 spelled with GPT-2's stand-in characters. Token 256 is
// a control token.
Tokenizer byte_vocabulary() {
    std::vector<std::string> tokens;
    uint32_t next_shifted = 0x100;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        std::string text;
        append_utf8(text, printable ? b : next_shifted++);
        tokens.push_back(text);
    }
    tokens.push_back("<|im_end|>");
    std::vector<int32_t> types(257, 1);
    types[256] = 3;
    GgufWriter writer;
    writer.add_string("tokenizer.ggml.model", "gpt2");
    writer.add_string("tokenizer.ggml.pre", "gpt2");
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    writer.add_int32_array("tokenizer.ggml.token_type", types);
    writer.add_string_array("tokenizer.ggml.merges", {});
    const std::vector<uint8_t> bytes = writer.to_bytes();
    return Tokenizer::from_gguf(GgufFile::parse(bytes));
}

std::vector<TokenId> byte_ids(std::string_view bytes) {
    std::vector<TokenId> ids;
    for (char c : bytes) ids.push_back(static_cast<uint8_t>(c));
    return ids;
}

TEST(StreamDecoder, HoldsAnEmojiUntilItsLastByte) {
    const Tokenizer tokenizer = byte_vocabulary();
    const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, four tokens here
    ASSERT_EQ(tokenizer.encode(emoji, false), byte_ids(emoji));
    StreamDecoder stream(tokenizer);
    EXPECT_EQ(stream.push(0xF0), "");
    EXPECT_EQ(stream.push(0x9F), "");
    EXPECT_EQ(stream.push(0x98), "");
    EXPECT_EQ(stream.push(0x80), emoji);
    EXPECT_EQ(stream.flush(), "");
}

TEST(StreamDecoder, EveryPieceIsValidAndTheWholeEqualsDecode) {
    const Tokenizer tokenizer = byte_vocabulary();
    const std::string text = "a👍🏽b 你好 👨‍👩‍👧 é!";
    const std::vector<TokenId> ids = tokenizer.encode(text, false);
    StreamDecoder stream(tokenizer);
    std::string streamed;
    for (TokenId id : ids) {
        const std::string piece = stream.push(id);
        EXPECT_TRUE(is_valid_utf8(piece));
        streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, tokenizer.decode(ids));
    EXPECT_EQ(streamed, text);
}

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
    const Tokenizer tokenizer = byte_vocabulary();
    const std::string replacement = "\xEF\xBF\xBD";
    StreamDecoder stream(tokenizer);
    EXPECT_EQ(stream.push(0xFF), replacement);  // can never start a character: no waiting
    EXPECT_EQ(stream.push('a'), "a");
    EXPECT_EQ(stream.push(0xE4), "");                // a 3-byte character starts...
    EXPECT_EQ(stream.push('b'), replacement + "b");  // ...and is broken off
    EXPECT_EQ(stream.push(0xE4), "");
    EXPECT_EQ(stream.push(0xB8), "");
    EXPECT_EQ(stream.flush(), replacement);  // the stream ended mid-character
    EXPECT_EQ(stream.flush(), "");
}

TEST(StreamDecoder, ControlTokensFollowRenderSpecial) {
    const Tokenizer tokenizer = byte_vocabulary();
    StreamDecoder hidden(tokenizer);
    EXPECT_EQ(hidden.push(256), "");
    StreamDecoder shown(tokenizer, /*render_special=*/true);
    EXPECT_EQ(shown.push(256), "<|im_end|>");
}

TEST(StreamDecoder, SmolLm2TokensStreamLikeDecode) {
    const std::string path = test::source_path(test::kSmolLm2Path);
    if (!std::filesystem::exists(path)) {
        GTEST_SKIP() << test::kSmolLm2Path << " is missing; `make test` downloads it";
    }
    const GgufFile model = GgufFile::open(path);
    const Tokenizer tokenizer = Tokenizer::from_gguf(model);
    const std::string text =
        "Emoji 👨‍👩‍👧‍👦👍🏽, CJK 中文分词, Hindi नमस्ते, "
        "done.";
    const std::vector<TokenId> ids = tokenizer.encode(text, false);
    StreamDecoder stream(tokenizer);
    std::string streamed;
    for (TokenId id : ids) {
        const std::string piece = stream.push(id);
        EXPECT_TRUE(is_valid_utf8(piece)) << "after token " << id;
        streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, tokenizer.decode(ids));
    EXPECT_EQ(streamed, text);
}

TEST(Utf8CharLength, StrictRules) {
    int bad = 0;
    EXPECT_EQ(utf8_char_length("a"), 1);
    EXPECT_EQ(utf8_char_length("\xC3\xA9"), 2);
    EXPECT_EQ(utf8_char_length("\xE4\xB8\xAD"), 3);
    EXPECT_EQ(utf8_char_length("\xF0\x9F\x98\x80"), 4);
    EXPECT_EQ(utf8_char_length("\xF0\x9F"), 0);         // unfinished
    EXPECT_EQ(utf8_char_length("\xC0\x80", &bad), -1);  // overlong
    EXPECT_EQ(bad, 1);
    EXPECT_EQ(utf8_char_length("\xED\xA0\x80", &bad), -1);  // surrogate
    EXPECT_EQ(bad, 1);
    EXPECT_EQ(utf8_char_length("\xF4\x90\x80\x80", &bad), -1);  // above U+10FFFF
    EXPECT_EQ(utf8_char_length("\xE4\xB8x", &bad), -1);         // broken after two bytes
    EXPECT_EQ(bad, 2);
}

}  // namespace
}  // namespace servelab
