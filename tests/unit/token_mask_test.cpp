// token_mask_test.cpp — the token masks: the cached mask equals the trie
// walk's, which equals the definition (the tokens a fork takes).
//
// Lab 12 tests (chapter 11.6, constrained decoding). States are reached by
// random walks that pick allowed tokens; vocabularies are made up (bytes
// that straddle rule boundaries and UTF-8 characters included) or SmolLM2's
// (skipped when the model file is absent). Also: tokens whose fate depends
// on the stacks below, decided both ways; the compile time limit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_matcher.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/tokenizer.h"
#include "tests/unit/grammar_test_util.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::lit;
using test::ref;
using test::seq;
using test::set;

std::string shown(const TokenVocabulary& v, TokenId t) {
    std::string out = "token " + std::to_string(t) + " '";
    for (const char c : v.token_bytes[size_t(t)]) {
        out += (uint8_t(c) >= 0x20 && uint8_t(c) < 0x7F) ? std::string(1, c)
                                                         : fmt::format("\\x{:02X}", uint8_t(c));
    }
    return out + "'";
}

// The definition: the tokens a fork of `m` takes.
TokenBitmask mask_by_definition(const GrammarMatcher& m) {
    const TokenVocabulary& v = m.compiled().vocabulary();
    TokenBitmask mask(v.size());
    GrammarMatcher fork = m.fork();
    for (TokenId t = 0; t < v.size(); ++t) {
        if (fork.accept_token(t)) {
            mask.set(t);
            fork.rollback(1);
        }
    }
    return mask;
}

// Names the first token on which two masks disagree.
std::string first_difference(const TokenBitmask& got, const TokenBitmask& want,
                             const TokenVocabulary& v) {
    for (TokenId t = 0; t < want.size(); ++t) {
        if (got.test(t) != want.test(t)) {
            return shown(v, t) + (want.test(t) ? " should be allowed" : " should be refused");
        }
    }
    return "none";
}

// At the matcher's state: cached mask == walked mask == definition, and a
// refused token's bytes are refused as raw bytes too.
void expect_masks_agree(const GrammarMatcher& m, bool with_definition, const std::string& where) {
    const TokenVocabulary& v = m.compiled().vocabulary();
    TokenBitmask cached, walked;
    m.fill_next_token_bitmask(cached);
    m.fill_next_token_bitmask_by_walk(walked);
    ASSERT_EQ(cached, walked) << "cached vs walked: " << first_difference(cached, walked, v) << " "
                              << where;
    if (!with_definition) return;
    const TokenBitmask defined = mask_by_definition(m);
    ASSERT_EQ(walked, defined) << "walked vs definition: " << first_difference(walked, defined, v)
                               << " " << where;
    GrammarMatcher fork = m.fork();
    for (TokenId t = 0; t < v.size(); t += 7) {
        if (defined.test(t) || v.token_bytes[size_t(t)].empty()) continue;
        ASSERT_FALSE(fork.accept_bytes(v.token_bytes[size_t(t)]))
            << shown(v, t) << " is refused as a token but taken as bytes " << where;
    }
}

// Walks `steps` random allowed tokens (the end token last, when it is the
// only choice), checking the masks at every state on the way.
void check_random_walk(const std::shared_ptr<const CompiledGrammar>& compiled, int steps,
                       int definition_every, test::RandomSource& rng, const std::string& name) {
    GrammarMatcher m(compiled);
    std::string text;
    TokenBitmask mask;
    for (int step = 0; step < steps && !m.is_terminated(); ++step) {
        const std::string where = name + " after '" + text + "' " + rng.trace();
        expect_masks_agree(m, step % definition_every == 0, where);
        if (::testing::Test::HasFatalFailure()) return;
        m.fill_next_token_bitmask(mask);
        std::vector<TokenId> allowed;
        for (TokenId t = 0; t < mask.size(); ++t) {
            if (mask.test(t) && !compiled->vocabulary().token_bytes[size_t(t)].empty()) {
                allowed.push_back(t);
            }
        }
        if (allowed.empty()) return;  // only the end is left
        const TokenId t = allowed[size_t(rng.integer(0, int64_t(allowed.size()) - 1))];
        ASSERT_TRUE(m.accept_token(t)) << shown(compiled->vocabulary(), t) << " " << where;
        text += compiled->vocabulary().token_bytes[size_t(t)];
    }
}

// ---------------------------------------------------------------- made-up vocabularies

TEST(TokenMask, CacheEqualsWalkEqualsDefinitionOnJson) {
    test::RandomSource rng;
    const auto vocabulary =
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(3000, rng.seed()));
    const auto compiled = CompiledGrammar::compile(test::json_like_grammar(), vocabulary);
    for (int walk = 0; walk < 8; ++walk) {
        check_random_walk(compiled, 60, 3, rng, "json-like grammar");
        if (HasFatalFailure()) return;
    }
}

TEST(TokenMask, CacheEqualsWalkEqualsDefinitionOnRandomGrammars) {
    test::RandomSource rng;
    // Tokens over a few letters: every string of 1 to 4 of them, and longer ones.
    auto vocabulary = std::make_shared<TokenVocabulary>();
    const std::string letters = "abc";
    std::vector<std::string> level = {""};
    for (int length = 1; length <= 4; ++length) {
        std::vector<std::string> next;
        for (const std::string& s : level) {
            for (const char c : letters) next.push_back(s + c);
        }
        vocabulary->token_bytes.insert(vocabulary->token_bytes.end(), next.begin(), next.end());
        level = next;
    }
    for (int i = 0; i < 200; ++i) {
        std::string s;
        for (int k = 0, n = int(rng.integer(4, 9)); k < n; ++k)
            s += letters[size_t(rng.integer(0, 2))];
        vocabulary->token_bytes.push_back(s);
    }
    vocabulary->end_tokens.push_back(vocabulary->size());
    vocabulary->token_bytes.push_back("");
    for (int round = 0; round < 200; ++round) {
        const Grammar g = test::random_grammar(rng.engine(), letters);
        try {
            const auto compiled = CompiledGrammar::compile(g, vocabulary);
            for (int walk = 0; walk < 3; ++walk) {
                check_random_walk(compiled, 12, 1, rng, "grammar\n" + g.to_string());
                if (HasFatalFailure()) return;
            }
        } catch (const GrammarError&) {  // a draw too ambiguous for the limits
        }
    }
}

// ---------------------------------------------------------------- context-dependent tokens

// root ::= "[" str "," str "]" | "{" str ":" str "}"; str ::= "\"" [a-z]* "\""
TEST(TokenMask, DecidesTokensThatRunPastTheirRuleByTheStacksBelow) {
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const int32_t str = b.rule("str");
    b.add_alternative(str, seq({lit("\""), ref(test::star(b, "chars", set("a-z"))), lit("\"")}));
    b.add_alternative(root, seq({lit("["), ref(str), lit(","), ref(str), lit("]")}));
    b.add_alternative(root, seq({lit("{"), ref(str), lit(":"), ref(str), lit("}")}));
    auto vocabulary = std::make_shared<TokenVocabulary>();
    vocabulary->token_bytes = {
        "[", "{", "\"", "ab", "\",", "\":", "b\",", "b\":", "\"]", "\"}", "b"};
    const auto compiled = CompiledGrammar::compile(b.build("root"), vocabulary);
    const Grammar& g = compiled->grammar();

    // The cache takes ", as dependent at the character position: not decided there.
    int32_t char_position = -1;
    for (int32_t e = 0; e < int32_t(g.num_elements()); ++e) {
        if (g.element(e).kind == GrammarElement::Kind::kBytes &&
            g.byte_set(g.element(e).index).contains('a')) {
            char_position = e;
        }
    }
    ASSERT_GE(char_position, 0);
    const PositionMasks& at_char = compiled->position_masks(char_position);
    EXPECT_TRUE(at_char.accepted.test(3)) << "\"ab\" stays inside the string";
    EXPECT_FALSE(at_char.accepted.test(6));
    bool dependent = false;
    for (const DependentToken& d : at_char.dependent) dependent = dependent || d.token == 6;
    EXPECT_TRUE(dependent) << "b\", runs past the string: its fate is the stack's below";

    const auto allowed_after = [&](const std::string& text) {
        GrammarMatcher m(compiled);
        EXPECT_TRUE(m.accept_bytes(text)) << text;
        TokenBitmask mask;
        m.fill_next_token_bitmask(mask);
        expect_masks_agree(m, true, "after " + text);
        return mask;
    };
    const TokenBitmask in_list = allowed_after("[\"a");
    EXPECT_TRUE(in_list.test(4) && in_list.test(6)) << "\", and b\", continue a list";
    EXPECT_FALSE(in_list.test(5) || in_list.test(7)) << "\": and b\": do not";
    const TokenBitmask in_map = allowed_after("{\"a");
    EXPECT_TRUE(in_map.test(5) && in_map.test(7)) << "\": and b\": continue a map";
    EXPECT_FALSE(in_map.test(4) || in_map.test(6)) << "\", and b\", do not";
    const TokenBitmask last_in_list = allowed_after("[\"a\",\"b");
    EXPECT_TRUE(last_in_list.test(8)) << "\"] closes the list";
    EXPECT_FALSE(last_in_list.test(4) || last_in_list.test(9));
}

int32_t rule_of_element(const Grammar& g, int32_t element) {
    while (g.element(element).kind != GrammarElement::Kind::kEnd) ++element;
    return g.element(element).index;
}

// escape ::= ... | "u" hex hex hex hex: a position in hex has four places
// to return to, and from most of them many tokens run on.
TEST(TokenMask, APositionInASharedRuleGetsAnEntryPerCallSite) {
    test::RandomSource rng;
    const auto vocabulary =
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(3000, rng.seed()));
    const auto compiled = CompiledGrammar::compile(test::json_like_grammar(), vocabulary);
    const Grammar& g = compiled->grammar();
    int32_t hex_position = -1;
    for (int32_t e = 0; e < int32_t(g.num_elements()); ++e) {
        if (g.element(e).kind == GrammarElement::Kind::kBytes &&
            g.rule_name(rule_of_element(g, e)) == "hex") {
            hex_position = e;
        }
    }
    ASSERT_GE(hex_position, 0);
    const PositionMasks& base = compiled->position_masks(hex_position);
    ASSERT_EQ(base.refined.size(), 4u) << "one entry per call site of hex " << rng.trace();
    for (const PositionMasks& refined : base.refined) {
        EXPECT_LT(refined.dependent.size(), base.dependent.size());
        EXPECT_GT(refined.context_depth, base.context_depth);
    }
    GrammarMatcher m(compiled);
    ASSERT_TRUE(m.accept_bytes("{\"name\": \"a"));
    for (const char* more : {"\\", "u", "0", "0", "e", "9", "\\u", "D", "8"}) {
        ASSERT_TRUE(m.accept_bytes(more)) << more;
        expect_masks_agree(m, true, std::string("after more ") + more + " " + rng.trace());
        if (HasFatalFailure()) return;
    }
}

TEST(TokenMask, WithoutTheCacheTheMaskIsTheWalk) {
    test::RandomSource rng;
    const auto vocabulary =
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(800, rng.seed()));
    GrammarCompileOptions options;
    options.mask_cache = false;
    const auto compiled = CompiledGrammar::compile(test::json_like_grammar(), vocabulary, options);
    EXPECT_FALSE(compiled->has_mask_cache());
    check_random_walk(compiled, 20, 4, rng, "json-like grammar, no cache");
}

// ---------------------------------------------------------------- limits

TEST(TokenMask, CompilingPastTheTimeLimitIsAnError) {
    const auto vocabulary = std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(20000, 7));
    GrammarCompileOptions options;
    options.time_limit = std::chrono::milliseconds(1);
    const std::string message = test::error_of(
        [&] { CompiledGrammar::compile(test::json_like_grammar(), vocabulary, options); });
    EXPECT_NE(message.find("over 1 ms"), std::string::npos) << message;
}

// ---------------------------------------------------------------- SmolLM2

class TokenMaskSmolLm2 : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!std::filesystem::exists(test::source_path(test::kSmolLm2Path))) {
            GTEST_SKIP() << test::kSmolLm2Path << " is missing; `make test` downloads it";
        }
    }
    std::shared_ptr<const TokenVocabulary> vocabulary() const {
        const Tokenizer tokenizer =
            Tokenizer::from_gguf(GgufFile::open(test::source_path(test::kSmolLm2Path)));
        return std::make_shared<TokenVocabulary>(TokenVocabulary::from_tokenizer(tokenizer));
    }
};

TEST_F(TokenMaskSmolLm2, CacheEqualsWalkEqualsDefinitionOnJson) {
    test::RandomSource rng;
    const auto compiled = CompiledGrammar::compile(test::json_like_grammar(), vocabulary());
    for (int walk = 0; walk < 2; ++walk) {
        check_random_walk(compiled, 12, 4, rng, "json-like grammar, SmolLM2");
        if (HasFatalFailure()) return;
    }
}

// The states a real document passes through, token by token as SmolLM2
// writes it (escapes, a \u escape, nesting and spacing included).
TEST_F(TokenMaskSmolLm2, CacheEqualsWalkAlongARealDocument) {
    const Tokenizer tokenizer =
        Tokenizer::from_gguf(GgufFile::open(test::source_path(test::kSmolLm2Path)));
    const auto compiled = CompiledGrammar::compile(
        test::json_like_grammar(),
        std::make_shared<TokenVocabulary>(TokenVocabulary::from_tokenizer(tokenizer)));
    const std::string document =
        "{\"name\": \"Zo\u00eb \\\"Z\\\"\", \"age\": 7, \"score\": -0.5e3, \"active\": false,\n"
        "  \"tags\": [\"a b\", \"\"], \"extra\": {\"k\": [1, {\"x\": null}], \"t\": true}}";
    GrammarMatcher m(compiled);
    const std::vector<TokenId> tokens = tokenizer.encode(document, false);
    for (size_t i = 0; i < tokens.size(); ++i) {
        expect_masks_agree(m, i % 8 == 0, "at token " + std::to_string(i) + " of " + document);
        if (HasFatalFailure()) return;
        ASSERT_TRUE(m.accept_token(tokens[i])) << "token " << i << " of " << document;
    }
    EXPECT_TRUE(m.can_terminate());
}

TEST_F(TokenMaskSmolLm2, AStringValueEndsByTheKeysOrder) {
    const auto v = vocabulary();
    const auto compiled = CompiledGrammar::compile(test::json_like_grammar(), v);
    GrammarMatcher m(compiled);
    ASSERT_TRUE(m.accept_bytes("{\"name\": \"Ada"));
    expect_masks_agree(m, true, "in the name");
    TokenBitmask mask;
    m.fill_next_token_bitmask(mask);
    int checked = 0;
    for (TokenId t = 0; t < v->size(); ++t) {
        const std::string& bytes = v->token_bytes[size_t(t)];
        if (bytes == "\"," || bytes == "\"") {
            EXPECT_TRUE(mask.test(t)) << shown(*v, t);
            ++checked;
        }
        if (bytes == "\"}" || bytes == "\":" || bytes == "\"]") {
            EXPECT_FALSE(mask.test(t)) << shown(*v, t) << ": the object goes on with \"age\"";
            ++checked;
        }
    }
    EXPECT_GE(checked, 4) << "SmolLM2 has these tokens";
}

}  // namespace
}  // namespace servelab
