// tokenizer_golden_test.cpp — servelab's token ids equal llama.cpp's on a corpus.
//
// Part of the model loader tests (all labs; tokenizer). The corpus and
// llama.cpp's answers come from tools/goldens/make_tokenizer_goldens.py
// (data/golden/tokenizer/smollm2_llamacpp.json). Every string is encoded with
// the real SmolLM2 vocabulary and must give exactly llama.cpp's ids; decoding
// must give llama.cpp's detokenization, which for valid UTF-8 is the input.
// The same corpus is also checked with tokenizer.ggml.pre swapped for "gpt-2"
// and "default", as llama.cpp was run that way too.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"
#include "reference/model/tokenizer.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::kSmolLm2Path;
using test::source_path;

constexpr const char* kGoldenPath = "data/golden/tokenizer/smollm2_llamacpp.json";

std::string from_hex(const std::string& hex) {
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    return bytes;
}

std::string printable(const std::string& bytes) {
    nlohmann::json as_json = bytes;  // escapes control characters and quotes
    return as_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ids_to_string(const std::vector<TokenId>& ids) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    return out + "]";
}

nlohmann::json load_golden() {
    std::ifstream in(source_path(kGoldenPath));
    EXPECT_TRUE(in.good()) << "cannot read " << kGoldenPath;
    return nlohmann::json::parse(in);
}

// A vocabulary-only copy of the model's metadata with another pre-tokenizer.
std::vector<uint8_t> with_pre_tokenizer(const GgufFile& model, const std::string& pre) {
    GgufWriter writer;
    for (const auto& [key, value] : model.metadata()) {
        if (key.rfind("tokenizer.ggml.", 0) == 0 && key != "tokenizer.ggml.pre") {
            writer.add_value(key, value);
        }
    }
    writer.add_string("tokenizer.ggml.pre", pre);
    return writer.to_bytes();
}

class TokenizerGoldenTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!std::filesystem::exists(source_path(kSmolLm2Path))) {
            GTEST_SKIP() << kSmolLm2Path << " is missing; `make test` downloads it";
        }
    }

    // Encode every case with `tokenizer`, compare with the case's `field`.
    void expect_ids_match(const Tokenizer& tokenizer, const std::string& field) {
        const nlohmann::json golden = load_golden();
        int agree = 0;
        int total = 0;
        int reported = 0;
        for (const auto& c : golden.at("cases")) {
            const std::string text = from_hex(c.at("text_hex").get<std::string>());
            const bool special = c.at("special").get<bool>();
            const auto expected = c.at(field).get<std::vector<TokenId>>();
            const std::vector<TokenId> got = tokenizer.encode(text, special);
            ++total;
            if (got == expected) {
                ++agree;
            } else if (reported++ < 10) {  // enough to diagnose, not a flood
                ADD_FAILURE() << "text " << printable(text) << " (parse_special=" << special
                              << ")\n  llama.cpp: " << ids_to_string(expected)
                              << "\n  servelab:  " << ids_to_string(got);
            }
        }
        std::cout << "[ golden   ] " << field << ": " << agree << "/" << total
                  << " strings tokenized exactly as llama.cpp (pre-tokenizer '"
                  << tokenizer.pre_tokenizer() << "')\n";
        EXPECT_EQ(agree, total);
        EXPECT_GE(total, 250);
    }
};

TEST_F(TokenizerGoldenTest, SmolLm2IdsMatchLlamaCpp) {
    const GgufFile model = GgufFile::open(source_path(kSmolLm2Path));
    const Tokenizer tokenizer = Tokenizer::from_gguf(model);
    ASSERT_EQ(tokenizer.pre_tokenizer(), "smollm");
    expect_ids_match(tokenizer, "ids");
}

TEST_F(TokenizerGoldenTest, Gpt2PreTokenizerMatchesLlamaCpp) {
    const GgufFile model = GgufFile::open(source_path(kSmolLm2Path));
    const std::vector<uint8_t> bytes = with_pre_tokenizer(model, "gpt-2");
    const Tokenizer tokenizer = Tokenizer::from_gguf(GgufFile::parse(bytes));
    expect_ids_match(tokenizer, "ids_gpt2");
}

TEST_F(TokenizerGoldenTest, DefaultPreTokenizerMatchesLlamaCpp) {
    const GgufFile model = GgufFile::open(source_path(kSmolLm2Path));
    const std::vector<uint8_t> bytes = with_pre_tokenizer(model, "default");
    const Tokenizer tokenizer = Tokenizer::from_gguf(GgufFile::parse(bytes));
    expect_ids_match(tokenizer, "ids_default");
}

// SmolLM2's vocabulary has no token for a few bytes (0x04, 0xFF, ...); like
// llama.cpp, encode drops them, so such strings cannot round-trip.
bool all_bytes_have_tokens(const Tokenizer& tokenizer, const std::string& text) {
    for (char byte : text) {
        if (tokenizer.byte_token(static_cast<uint8_t>(byte)) < 0) return false;
    }
    return true;
}

// Byte-level BPE loses nothing: decoding gives back the input, except where
// the input was not UTF-8 (bad bytes were encoded as U+FFFD, as in llama.cpp),
// held bytes without a token, or had special tokens (control tokens decode to
// nothing by default).
TEST_F(TokenizerGoldenTest, DecodeMatchesLlamaCppAndRoundTrips) {
    const GgufFile model = GgufFile::open(source_path(kSmolLm2Path));
    const Tokenizer tokenizer = Tokenizer::from_gguf(model);
    const nlohmann::json golden = load_golden();  // must outlive the loop below
    int round_trips = 0;
    for (const auto& c : golden.at("cases")) {
        const std::string text = from_hex(c.at("text_hex").get<std::string>());
        const auto ids = c.at("ids").get<std::vector<TokenId>>();
        const std::string plain = tokenizer.decode(ids);
        EXPECT_EQ(plain, from_hex(c.at("detok_hex").get<std::string>())) << printable(text);
        EXPECT_EQ(tokenizer.decode(ids, /*render_special=*/true),
                  from_hex(c.at("detok_special_hex").get<std::string>()))
            << printable(text);
        if (!c.at("special").get<bool>() && c.contains("text") &&
            all_bytes_have_tokens(tokenizer, text)) {
            EXPECT_EQ(plain, text) << "round trip of " << printable(text);
            ++round_trips;
        }
    }
    std::cout << "[ golden   ] " << round_trips << " valid UTF-8 strings round-trip exactly\n";
}

}  // namespace
}  // namespace servelab
