// token_trie_test.cpp — the grammar's view of the vocabulary: token bytes
// from a tokenizer, the token trie, the token bitmask.
//
// Lab 12 tests (chapter 11.6, constrained decoding). The trie is checked
// against its definition on made-up vocabularies (every token's bytes are
// the path to its node, depth-first order, subtree ranges); the vocabulary
// on a tiny GGUF tokenizer with one token of each type, and on SmolLM2's
// when the model file is there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "reference/constrained/token_bitmask.h"
#include "reference/constrained/token_trie.h"
#include "reference/constrained/token_vocabulary.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"
#include "reference/model/tokenizer.h"
#include "tests/unit/grammar_test_util.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

// ---------------------------------------------------------------- trie

// The bytes from the root to each node, rebuilt from depths and bytes alone.
std::vector<std::string> node_paths(const TokenTrie& trie) {
    std::vector<std::string> paths(trie.nodes().size());
    std::vector<std::string> open = {""};  // open[d]: the path of the last node at depth d
    for (size_t n = 1; n < trie.nodes().size(); ++n) {
        const TokenTrie::Node& node = trie.nodes()[n];
        open.resize(size_t(node.depth));
        paths[n] = open.back() + char(node.byte);
        open.push_back(paths[n]);
    }
    return paths;
}

void expect_trie_holds_vocabulary(const TokenVocabulary& vocabulary, const std::string& trace) {
    const TokenTrie trie(vocabulary);
    const auto& nodes = trie.nodes();
    ASSERT_FALSE(nodes.empty());
    EXPECT_EQ(nodes[0].depth, 0);
    EXPECT_TRUE(nodes[0].tokens.empty()) << "the root stands for no bytes";
    EXPECT_EQ(nodes[0].subtree_size, int32_t(nodes.size())) << trace;
    const std::vector<std::string> paths = node_paths(trie);
    std::map<TokenId, int> times_seen;
    for (size_t n = 1; n < nodes.size(); ++n) {
        const TokenTrie::Node& node = nodes[n];
        ASSERT_GE(node.subtree_size, 1) << "node " << n << trace;
        ASSERT_LE(n + size_t(node.subtree_size), nodes.size()) << "node " << n << trace;
        // Its subtree is the nodes below it: deeper, and with its path as prefix.
        for (size_t m = n + 1; m < n + size_t(node.subtree_size); ++m) {
            ASSERT_GT(nodes[m].depth, node.depth) << "node " << m << " in node " << n << "'s range";
            ASSERT_EQ(paths[m].substr(0, paths[n].size()), paths[n]) << trace;
        }
        // The node right after the subtree is not below it.
        const size_t after = n + size_t(node.subtree_size);
        if (after < nodes.size()) {
            ASSERT_LE(nodes[after].depth, node.depth) << trace;
        }
        for (const TokenId t : node.tokens) {
            EXPECT_EQ(vocabulary.token_bytes[size_t(t)], paths[n])
                << "token " << t << " sits at the node of other bytes" << trace;
            ++times_seen[t];
        }
    }
    // No two nodes share a path (children are distinct bytes).
    std::map<std::string, int> path_count;
    for (size_t n = 1; n < nodes.size(); ++n) {
        EXPECT_EQ(++path_count[paths[n]], 1) << "two nodes for the same bytes" << trace;
    }
    for (TokenId t = 0; t < vocabulary.size(); ++t) {
        const bool is_end = std::find(vocabulary.end_tokens.begin(), vocabulary.end_tokens.end(),
                                      t) != vocabulary.end_tokens.end();
        const int expected = vocabulary.token_bytes[size_t(t)].empty() || is_end ? 0 : 1;
        EXPECT_EQ(times_seen[t], expected) << "token " << t << trace;
    }
}

TEST(TokenTrie, HoldsEachTokenOnceAtThePathOfItsBytes) {
    TokenVocabulary v;
    v.token_bytes = {"a", "ab", "abc", "b", "", "ab", "\xFF", "\x80\x01", "ba", "end"};
    v.end_tokens = {9};  // an end token stands for the end, whatever its bytes
    expect_trie_holds_vocabulary(v, "");
    const TokenTrie trie(v);
    // Nodes: root, a, ab, abc, b, ba, \x80, \x80\x01, \xFF (byte order, unsigned).
    ASSERT_EQ(trie.nodes().size(), 9u);
    EXPECT_EQ(trie.nodes()[2].tokens, (std::vector<TokenId>{1, 5})) << "same bytes, one node";
    EXPECT_EQ(trie.nodes()[1].subtree_size, 3);
    EXPECT_EQ(trie.nodes()[6].byte, 0x80) << "bytes compare as unsigned";
    EXPECT_EQ(trie.nodes()[8].byte, 0xFF);
}

TEST(TokenTrie, HoldsRandomVocabularies) {
    test::RandomSource rng;
    for (int round = 0; round < 5; ++round) {
        const TokenVocabulary v =
            test::synthetic_vocabulary(300 + 200 * size_t(round), rng.engine()());
        expect_trie_holds_vocabulary(v, " " + rng.trace());
    }
}

TEST(TokenTrie, EmptyVocabularyIsJustTheRoot) {
    TokenVocabulary v;
    v.token_bytes = {"", ""};
    const TokenTrie trie(v);
    ASSERT_EQ(trie.nodes().size(), 1u);
    EXPECT_EQ(trie.nodes()[0].subtree_size, 1);
}

// ---------------------------------------------------------------- bitmask

TEST(TokenBitmask, CountsAndAppliesItsBits) {
    TokenBitmask mask(130);
    EXPECT_EQ(mask.count(), 0);
    for (const TokenId t : {0, 63, 64, 129}) mask.set(t);
    EXPECT_EQ(mask.count(), 4);
    mask.reset(63);
    EXPECT_EQ(mask.count(), 3);
    std::vector<float> logits(132, 1.5f);  // two ids past the mask: a padded model vocabulary
    mask.apply(logits);
    for (size_t t = 0; t < logits.size(); ++t) {
        const bool allowed = t == 0 || t == 64 || t == 129;
        if (allowed) {
            EXPECT_EQ(logits[t], 1.5f) << "token " << t << " is allowed";
        } else {
            EXPECT_TRUE(std::isinf(logits[t]) && logits[t] < 0) << "token " << t;
        }
    }
}

// ---------------------------------------------------------------- vocabulary

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

// A GGUF tokenizer with one token of each type. Token texts are in GPT-2's
// byte alphabet ("Ġ" is a space).
Tokenizer tiny_tokenizer() {
    const std::vector<std::string> tokens = {"a",         "Ġb",  "<unk>",  "<|endoftext|>",
                                             "<tag>",     "<x>", "<0x41>", "<|im_start|>",
                                             "<|im_end|>"};
    const std::vector<int32_t> types = {kNormal, kNormal, kUnknown, kControl, kUserDefined,
                                        kUnused, kByte,   kControl, kControl};
    GgufWriter writer;
    writer.add_string("tokenizer.ggml.model", "gpt2");
    writer.add_string("tokenizer.ggml.pre", "gpt2");
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    writer.add_int32_array("tokenizer.ggml.token_type", types);
    writer.add_string_array("tokenizer.ggml.merges", {});
    writer.add_uint32("tokenizer.ggml.eos_token_id", 3);
    const std::vector<uint8_t> bytes = writer.to_bytes();
    return Tokenizer::from_gguf(GgufFile::parse(bytes));
}

TEST(TokenVocabulary, KeepsTheBytesOfTextTokensOnly) {
    const TokenVocabulary v = TokenVocabulary::from_tokenizer(tiny_tokenizer());
    ASSERT_EQ(v.size(), 9);
    EXPECT_EQ(v.token_bytes[0], "a");
    EXPECT_EQ(v.token_bytes[1], " b") << "normal tokens: decoded from the byte alphabet";
    EXPECT_EQ(v.token_bytes[2], "") << "unknown";
    EXPECT_EQ(v.token_bytes[3], "") << "the end token stands for the end, not for text";
    EXPECT_EQ(v.token_bytes[4], "<tag>") << "user-defined tokens are text";
    EXPECT_EQ(v.token_bytes[5], "") << "unused";
    EXPECT_EQ(v.token_bytes[6], "A") << "a byte token is its byte";
    EXPECT_EQ(v.token_bytes[7], "") << "control";
    EXPECT_EQ(v.token_bytes[8], "") << "control (an end of turn)";
    EXPECT_EQ(v.end_tokens, (std::vector<TokenId>{3, 8})) << "eos and <|im_end|>, each once";
}

TEST(TokenVocabulary, SmolLm2) {
    if (!std::filesystem::exists(test::source_path(test::kSmolLm2Path))) {
        GTEST_SKIP() << test::kSmolLm2Path << " is missing; `make test` downloads it";
    }
    const Tokenizer tokenizer =
        Tokenizer::from_gguf(GgufFile::open(test::source_path(test::kSmolLm2Path)));
    const TokenVocabulary v = TokenVocabulary::from_tokenizer(tokenizer);
    ASSERT_EQ(v.size(), 49152);
    EXPECT_EQ(v.token_bytes[size_t(tokenizer.find_token("Ġ{\""))], " {\"");
    const TokenId im_end = tokenizer.find_token("<|im_end|>");
    EXPECT_TRUE(v.token_bytes[size_t(im_end)].empty());
    EXPECT_NE(std::find(v.end_tokens.begin(), v.end_tokens.end(), im_end), v.end_tokens.end());
    EXPECT_NE(std::find(v.end_tokens.begin(), v.end_tokens.end(), tokenizer.eos_id()),
              v.end_tokens.end());
    int empty = 0;
    for (const std::string& bytes : v.token_bytes) empty += bytes.empty();
    EXPECT_LT(empty, 40) << "only the special tokens have no bytes";
}

}  // namespace
}  // namespace servelab
