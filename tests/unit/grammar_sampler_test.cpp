// grammar_sampler_test.cpp — random sentences of a grammar (grammar_sampler.h).
//
// Lab 12 support (chapter 11.6, constrained decoding). Every sample is a
// sentence (the Earley oracle says so); shortest lengths are right;
// recursive grammars whose
// random derivations would grow without end still close near the soft
// limit; a grammar that derives nothing finite is refused.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "reference/constrained/gbnf_parser.h"
#include "reference/constrained/grammar_sampler.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

TEST(GrammarSampler, SamplesAreSentencesAndVary) {
    test::RandomSource random;
    for (const char* text : {
             R"g(root ::= "a" | "b" root | "(" root ")" root)g",
             R"g(root ::= [a-c]* ("," [0-9]{1,3})? "." | "")g",
             "root ::= item+\nitem ::= [α-ω] | \"x\" item? \"y\"",
         }) {
        const Grammar g = parse_gbnf(text);
        const GrammarSampler sampler(g);
        std::set<std::string> distinct;
        for (int k = 0; k < 200; ++k) {
            const std::string s = sampler.sample(random.engine(), 32);
            distinct.insert(s);
            ASSERT_TRUE(test::grammar_accepts(g, s))
                << text << " sampled " << s << "; " << random.trace();
        }
        EXPECT_GT(distinct.size(), 20u) << text;
    }
}

// The shortest sentence length of the root, worked out by hand (a rule that
// could end sooner through a longer-looking alternative, "" inside, ...).
TEST(GrammarSampler, ShortestLengthIsTheShortestSentence) {
    const char* cases[][2] = {
        {R"g(root ::= "ab" | "c" root)g", "2"},
        {"root ::= a b\na ::= \"\" | \"x\"\nb ::= a a \"y\"", "1"},
        {"root ::= a\na ::= a2 | \"zzzz\"\na2 ::= \"q\" a | \"rr\"", "2"},
        {R"g(root ::= "(" root ")" | "[]" "[]")g", "4"},
    };
    for (const auto& [text, expected] : cases) {
        const Grammar g = parse_gbnf(text);
        EXPECT_EQ(GrammarSampler(g).shortest_length(g.root_rule()), std::stoll(expected)) << text;
    }
}

TEST(GrammarSampler, RecursionClosesPastTheSoftLimit) {
    // Left alone, a random walk here nests forever about half the time.
    const Grammar g = parse_gbnf(R"g(root ::= "[" root root "]" | "[" root "]" | "x")g");
    const GrammarSampler sampler(g);
    test::RandomSource random;
    for (int k = 0; k < 100; ++k) {
        const std::string s = sampler.sample(random.engine(), 64);
        ASSERT_TRUE(test::grammar_accepts(g, s)) << s;
        // Past 64 bytes each open bracket closes with its shortest tail.
        EXPECT_LT(s.size(), 64u * 4) << s;
    }
}

TEST(GrammarSampler, RefusesAGrammarWithoutFiniteSentences) {
    GrammarBuilder builder;
    const int32_t root = builder.rule("root");
    builder.add_alternative(root, {GrammarSymbol::of_byte('a'), GrammarSymbol::of_rule(root)});
    const Grammar g = builder.build("root");
    EXPECT_THROW(GrammarSampler{g}, GrammarError);
}

}  // namespace
}  // namespace servelab
