// grammar_matcher_test.cpp — the pushdown matcher: which bytes and tokens
// it takes, termination, end tokens, rollback, fork, and its limits.
//
// Lab 12 tests (chapter 11.6, constrained decoding). Hand grammars with
// answers worked out by hand, then random grammars and inputs against an
// independent recursive descent recognizer (grammar_test_util.h). The masks
// are tested in token_mask_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_matcher.h"
#include "reference/constrained/grammar_stacks.h"
#include "tests/unit/grammar_test_util.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::lit;
using test::ref;
using test::seq;
using test::set;

// A vocabulary of the given token bytes, then one control token (no bytes)
// and one end token.
std::shared_ptr<const TokenVocabulary> vocabulary_of(std::vector<std::string> tokens) {
    auto v = std::make_shared<TokenVocabulary>();
    v->token_bytes = std::move(tokens);
    v->token_bytes.push_back("");
    v->end_tokens.push_back(TokenId(v->token_bytes.size()));
    v->token_bytes.push_back("");
    return v;
}
TokenId control_token(const TokenVocabulary& v) {
    return v.size() - 2;
}
TokenId end_token(const TokenVocabulary& v) {
    return v.end_tokens[0];
}

GrammarMatcher matcher_for(Grammar g, std::vector<std::string> tokens = {"a"}) {
    return GrammarMatcher(CompiledGrammar::compile(std::move(g), vocabulary_of(std::move(tokens))));
}

// ---------------------------------------------------------------- stack sets

TEST(StackSet, KeepsEachStackOnce) {
    test::RandomSource rng;
    for (int round = 0; round < 3; ++round) {
        StackSet stacks;
        std::set<std::vector<int32_t>> expected;
        for (int i = 0; i < 3000; ++i) {  // past the index's first sizes, with repeats
            std::vector<int32_t> stack(size_t(rng.integer(0, 3)));
            for (int32_t& entry : stack) entry = int32_t(rng.integer(-2, 12));
            stacks.add(stack);
            expected.insert(stack);
            ASSERT_EQ(stacks.size(), expected.size()) << "after " << i << " adds " << rng.trace();
        }
        std::set<std::vector<int32_t>> got;
        for (size_t i = 0; i < stacks.size(); ++i) got.emplace(stacks[i].begin(), stacks[i].end());
        EXPECT_EQ(got, expected) << rng.trace();
        EXPECT_EQ(stacks.has_complete(), expected.count({}) > 0);
        stacks.clear();
        EXPECT_TRUE(stacks.empty());
        stacks.add(std::vector<int32_t>{1, 2});
        stacks.add(std::vector<int32_t>{1, 2});
        EXPECT_EQ(stacks.size(), 1u) << "a cleared set finds equal stacks again";
    }
}

// ---------------------------------------------------------------- bytes

TEST(GrammarMatcher, TakesBytesOfTheLanguageOnly) {
    GrammarMatcher m = matcher_for(test::one_rule_grammar({lit("ab"), lit("ac"), lit("b")}));
    EXPECT_FALSE(m.can_terminate());
    EXPECT_FALSE(m.accept_bytes("x"));
    EXPECT_FALSE(m.accept_bytes("ad")) << "a refused string must change nothing";
    EXPECT_TRUE(m.accept_bytes("a"));
    EXPECT_FALSE(m.accept_bytes("a"));
    EXPECT_FALSE(m.can_terminate());
    EXPECT_TRUE(m.accept_bytes("c"));
    EXPECT_TRUE(m.can_terminate());
    EXPECT_TRUE(m.is_terminated()) << "\"ac\" cannot be extended";
    EXPECT_FALSE(m.accept_bytes("b"));
}

TEST(GrammarMatcher, TakesJsonLikeDocuments) {
    const std::string good =
        "{\"name\": \"Zo\xC3\xAB \\u00e9\\n\", \"age\": -12, \"score\": 3.5e+2, \"active\": true,"
        " \"tags\": [\"a\", \"b\"], \"extra\": {\"k\": [1, null, {}]}}";
    GrammarMatcher m = matcher_for(test::json_like_grammar());
    ASSERT_TRUE(m.accept_bytes(good)) << good;
    EXPECT_TRUE(m.can_terminate());
    for (const std::string bad : {
             "{\"name\": \"a\", \"age\": 01",   // a leading zero
             "{\"name\": \"a\x01\"",            // a control character
             "{\"name\": \"\xC3\x28\"",         // a broken UTF-8 character
             "{\"name\": \"\\x\"",              // an unknown escape
             "{\"age\": 1",                     // a key out of order
             "{\"name\": \"a\", \"age\": 1.5",  // not an integer
         }) {
        GrammarMatcher fresh = matcher_for(test::json_like_grammar());
        EXPECT_FALSE(fresh.accept_bytes(bad)) << bad;
    }
}

TEST(GrammarMatcher, RightRecursionKeepsStacksShallow) {
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const int32_t items =
        test::star(b, "items", seq({lit("a"), ref(test::star(b, "bs", lit("b")))}));
    b.add_alternative(root, seq({lit("["), ref(items), lit("]")}));
    const Grammar g = b.build("root");
    StackStepper stepper(g);
    StackSet stacks = stepper.initial_stacks();
    StackSet next;
    size_t deepest = 0;
    for (int i = 0; i < 2000; ++i) {
        const char byte = i == 0 ? '[' : "ba"[i % 2];
        stepper.advance(stacks, uint8_t(byte), next);
        ASSERT_FALSE(next.empty()) << "byte " << i;
        std::swap(stacks, next);
        for (size_t s = 0; s < stacks.size(); ++s) deepest = std::max(deepest, stacks[s].size());
    }
    EXPECT_LE(deepest, 3u) << "tail calls push no return position, so repetition does not grow";
}

TEST(GrammarMatcher, AgreesWithARecursiveDescentRecognizer) {
    test::RandomSource rng;
    for (int round = 0; round < 150; ++round) {
        const Grammar g = test::random_grammar(rng.engine(), "abc");
        std::vector<std::string> inputs;
        for (int k = 0; k < 6; ++k) {
            std::string s = test::random_derivation(g, rng.engine(), 10);
            inputs.push_back(s);
            if (!s.empty()) {  // and near misses: one byte changed, dropped or added
                std::string changed = s;
                changed[size_t(rng.integer(0, int64_t(s.size()) - 1))] = "abcd"[rng.integer(0, 3)];
                inputs.push_back(changed);
                inputs.push_back(s.substr(0, s.size() - 1));
                inputs.push_back(s + "abc"[rng.integer(0, 2)]);
            }
        }
        for (const std::string& input : inputs) {
            try {
                GrammarMatcher m(CompiledGrammar::compile(g, vocabulary_of({"a", "b", "c"})));
                const bool taken = m.accept_bytes(input);
                test::ViablePrefixOracle oracle(g, input);
                ASSERT_EQ(taken, oracle.viable()) << "input '" << input << "' in\n"
                                                  << g.to_string() << rng.trace();
                if (taken) {
                    ASSERT_EQ(m.can_terminate(), oracle.complete())
                        << "input '" << input << "' in\n"
                        << g.to_string() << rng.trace();
                }
            } catch (const GrammarError&) {  // a draw too ambiguous for the limits
            }
        }
    }
}

// ---------------------------------------------------------------- tokens

TEST(GrammarMatcher, EndTokensOnlyWhereTheOutputMayEnd) {
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    b.add_alternative(root, seq({lit("a"), ref(test::star(b, "more", lit("a")))}));
    const auto vocabulary = vocabulary_of({"a", "aa", "b"});
    GrammarMatcher m(CompiledGrammar::compile(b.build("root"), vocabulary));
    const TokenId end = end_token(*vocabulary);
    EXPECT_FALSE(m.accept_token(end)) << "nothing yet: \"\" is not a sentence";
    EXPECT_FALSE(m.accept_token(control_token(*vocabulary))) << "a control token is never output";
    ASSERT_TRUE(m.accept_token(1));
    EXPECT_TRUE(m.can_terminate());
    EXPECT_FALSE(m.is_terminated()) << "more a's may come";
    EXPECT_FALSE(m.accept_token(control_token(*vocabulary)));
    ASSERT_TRUE(m.accept_token(end));
    EXPECT_TRUE(m.is_terminated());
    EXPECT_FALSE(m.can_terminate());
    EXPECT_FALSE(m.accept_token(0)) << "nothing after an end token";
    EXPECT_FALSE(m.accept_token(end));
    EXPECT_FALSE(m.accept_bytes("a"));
    TokenBitmask mask;
    m.fill_next_token_bitmask(mask);
    EXPECT_EQ(mask.size(), vocabulary->size()) << "the mask is sized to the vocabulary";
    EXPECT_EQ(mask.count(), 0) << "nothing is allowed after an end token";
    m.rollback(1);
    EXPECT_FALSE(m.is_terminated());
    m.fill_next_token_bitmask(mask);
    EXPECT_TRUE(mask.test(0) && mask.test(1) && mask.test(end));
    EXPECT_EQ(mask.count(), 3);
}

TEST(GrammarMatcher, ACompleteSentenceThatCannotGrowAllowsOnlyTheEnd) {
    const auto vocabulary = vocabulary_of({"yes", "no", "y", "es", "s"});
    GrammarMatcher m(
        CompiledGrammar::compile(test::one_rule_grammar({lit("yes"), lit("no")}), vocabulary));
    ASSERT_TRUE(m.accept_token(2));
    ASSERT_TRUE(m.accept_token(3));
    EXPECT_TRUE(m.is_terminated()) << "no byte can follow \"yes\"";
    EXPECT_TRUE(m.can_terminate());
    TokenBitmask mask;
    m.fill_next_token_bitmask(mask);
    EXPECT_EQ(mask.count(), 1);
    EXPECT_TRUE(mask.test(end_token(*vocabulary)));
    EXPECT_FALSE(m.accept_token(4));
    EXPECT_TRUE(m.accept_token(end_token(*vocabulary)));
}

TEST(GrammarMatcher, CompilingNeedsAVocabularyWhoseEndTokensAreInIt) {
    EXPECT_NE(test::error_of(
                  [] { CompiledGrammar::compile(test::one_rule_grammar({lit("a")}), nullptr); }),
              "");
    auto vocabulary = std::make_shared<TokenVocabulary>();
    vocabulary->token_bytes = {"a"};
    vocabulary->end_tokens = {5};
    const std::string message = test::error_of(
        [&] { CompiledGrammar::compile(test::one_rule_grammar({lit("a")}), vocabulary); });
    EXPECT_NE(message.find("end token 5"), std::string::npos) << message;
    EXPECT_NE(test::error_of([] { GrammarMatcher m(nullptr); }), "");
}

TEST(GrammarMatcher, RefusesTokenIdsOutsideTheVocabulary) {
    GrammarMatcher m = matcher_for(test::one_rule_grammar({lit("a")}));
    const std::string message = test::error_of([&] { m.accept_token(99); });
    EXPECT_NE(message.find("token id 99"), std::string::npos) << message;
    EXPECT_NE(test::error_of([&] { m.accept_token(-1); }), "");
}

// ---------------------------------------------------------------- rollback and fork

TEST(GrammarMatcher, RollbackRestoresEachEarlierState) {
    test::RandomSource rng;
    const auto vocabulary =
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(600, rng.seed()));
    const auto compiled = CompiledGrammar::compile(test::json_like_grammar(), vocabulary);
    for (int round = 0; round < 10; ++round) {
        GrammarMatcher m(compiled);
        std::vector<TokenBitmask> masks;  // masks[i]: after i tokens
        std::vector<bool> may_end;
        TokenBitmask mask;
        for (int step = 0; step < 30 && !m.is_terminated(); ++step) {
            m.fill_next_token_bitmask(mask);
            masks.push_back(mask);
            may_end.push_back(m.can_terminate());
            std::vector<TokenId> allowed;
            for (TokenId t = 0; t < mask.size(); ++t) {
                if (mask.test(t)) allowed.push_back(t);
            }
            ASSERT_FALSE(allowed.empty()) << rng.trace();
            ASSERT_TRUE(
                m.accept_token(allowed[size_t(rng.integer(0, int64_t(allowed.size()) - 1))]));
        }
        m.fill_next_token_bitmask(mask);
        masks.push_back(mask);
        may_end.push_back(m.can_terminate());
        // Back to a random earlier point, then back to the start.
        const int32_t back_to = int32_t(rng.integer(0, m.num_tokens()));
        m.rollback(m.num_tokens() - back_to);
        ASSERT_EQ(m.num_tokens(), back_to);
        m.fill_next_token_bitmask(mask);
        EXPECT_EQ(mask, masks[size_t(back_to)])
            << "after rolling back to " << back_to << " tokens " << rng.trace();
        EXPECT_EQ(m.can_terminate(), may_end[size_t(back_to)]);
        m.rollback(back_to);
        m.fill_next_token_bitmask(mask);
        EXPECT_EQ(mask, masks[0]) << rng.trace();
    }
}

TEST(GrammarMatcher, RollbackRefusesMoreThanItHas) {
    GrammarMatcher m = matcher_for(test::one_rule_grammar({lit("aa")}));
    ASSERT_TRUE(m.accept_token(0));
    EXPECT_NE(test::error_of([&] { m.rollback(2); }), "");
    EXPECT_NE(test::error_of([&] { m.rollback(-1); }), "");
    EXPECT_EQ(m.num_tokens(), 1) << "a refused rollback changes nothing";
    m.rollback(0);
    EXPECT_EQ(m.num_tokens(), 1);
}

TEST(GrammarMatcher, ForksAreIndependent) {
    const auto vocabulary = vocabulary_of({"a", "b"});
    GrammarMatcher m(CompiledGrammar::compile(
        test::one_rule_grammar({lit("ab"), lit("aa"), lit("b")}), vocabulary));
    ASSERT_TRUE(m.accept_token(0));
    GrammarMatcher fork = m.fork();
    ASSERT_TRUE(fork.accept_token(1));
    EXPECT_TRUE(fork.is_terminated());
    EXPECT_FALSE(m.is_terminated());
    EXPECT_EQ(m.num_tokens(), 1);
    ASSERT_TRUE(m.accept_token(0)) << "the original still takes \"a\"";
    EXPECT_FALSE(fork.accept_token(0));
}

// ---------------------------------------------------------------- limits

TEST(GrammarMatcher, RefusesTooManyParsesAtOnce) {
    // After n a's, each of the 2^n strings of b's and c's may close them.
    GrammarBuilder b;
    const int32_t s = b.rule("s");
    b.add_alternative(s, seq({lit("a"), ref(s), lit("b")}));
    b.add_alternative(s, seq({lit("a"), ref(s), lit("c")}));
    b.add_alternative(s, {});
    GrammarMatcher m = matcher_for(b.build("s"), {"b"});
    ASSERT_TRUE(m.accept_bytes("aaaa"));
    const std::string message = test::error_of([&] { m.accept_bytes(std::string(20, 'a')); });
    EXPECT_NE(message.find("too ambiguous"), std::string::npos) << message;
    EXPECT_TRUE(m.accept_bytes("bcbc")) << "the refused bytes changed nothing";
    EXPECT_TRUE(m.can_terminate());
}

TEST(GrammarMatcher, FollowsALongChainOfRules) {
    // r0 ::= "x" r1; r1 ::= "x" r2; ... each a tail call; and s0 ::= s1 "y"; ...
    // (a chain entered before any byte) too deep to expand.
    GrammarBuilder b;
    const int kLength = 5000;
    for (int i = 0; i < kLength; ++i) {
        const int32_t rule = b.rule("r" + std::to_string(i));
        b.add_alternative(rule, i + 1 < kLength
                                    ? seq({lit("x"), ref(b.rule("r" + std::to_string(i + 1)))})
                                    : lit("x"));
    }
    GrammarMatcher m = matcher_for(b.build("r0"), {"x", "xxxx"});
    ASSERT_TRUE(m.accept_bytes(std::string(kLength - 1, 'x')));
    EXPECT_FALSE(m.can_terminate());
    EXPECT_TRUE(m.accept_token(0));
    EXPECT_TRUE(m.is_terminated());

    GrammarBuilder deep;
    for (int i = 0; i < kLength; ++i) {
        const int32_t rule = deep.rule("s" + std::to_string(i));
        deep.add_alternative(
            rule, i + 1 < kLength ? seq({ref(deep.rule("s" + std::to_string(i + 1))), lit("y")})
                                  : lit("y"));
    }
    const std::string message = test::error_of([&] { matcher_for(deep.build("s0"), {"y"}); });
    EXPECT_NE(message.find("nests rules"), std::string::npos) << message;
}

TEST(GrammarMatcher, RefusesExponentialExpansion) {
    // 2^30 ways through thirty rules that each match "" in two ways.
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const int32_t twice_empty = b.rule("e");
    const int32_t empty = b.rule("nothing");
    b.add_alternative(empty, {});
    b.add_alternative(twice_empty, {});
    b.add_alternative(twice_empty, ref(empty));
    test::Symbols symbols;
    for (int i = 0; i < 30; ++i) symbols.push_back(GrammarSymbol::of_rule(twice_empty));
    symbols.push_back(GrammarSymbol::of_byte('x'));
    b.add_alternative(root, symbols);
    const auto vocabulary = vocabulary_of({"x"});
    GrammarCompileOptions options;
    options.mask_cache = false;
    const auto compiled = CompiledGrammar::compile(b.build("root"), vocabulary, options);
    const std::string message = test::error_of([&] { GrammarMatcher m(compiled); });
    EXPECT_NE(message.find("too ambiguous"), std::string::npos) << message;
}

}  // namespace
}  // namespace servelab
