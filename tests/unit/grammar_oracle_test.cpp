// grammar_oracle_test.cpp — the Earley oracle itself, against brute force on small random grammars.
//
// Lab 12 test support (chapter 11.6, constrained decoding). Every grammar
// test leans on grammar_oracle.h, so it is checked here against the
// plainest possible judge: each rule's language up to a few bytes, built
// bottom-up by a fixed point over sets of strings. Random grammars of a few
// rules over {a, b, c}, with empty alternatives, rules that match only "",
// rules that derive nothing, and right recursion (left recursion is refused
// by the builder, so those draws are skipped), are judged on every string
// up to that length.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "reference/constrained/grammar.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

constexpr size_t kMaxLength = 5;
const std::string kAlphabet = "abc";

using Language = std::set<std::string>;
using Rules = std::vector<std::vector<std::vector<GrammarSymbol>>>;

// Each rule's strings of at most kMaxLength bytes (exact: a derivation of
// such a string only ever builds shorter pieces).
std::vector<Language> bounded_languages(const Rules& rules) {
    std::vector<Language> language(rules.size());
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < rules.size(); ++r) {
            for (const auto& alternative : rules[r]) {
                Language strings = {""};
                for (const GrammarSymbol& s : alternative) {
                    Language pieces;
                    if (s.kind == GrammarSymbol::Kind::kRule) pieces = language[size_t(s.rule)];
                    for (const char c : kAlphabet) {
                        if (s.kind == GrammarSymbol::Kind::kBytes && s.bytes.contains(uint8_t(c))) {
                            pieces.insert(std::string(1, c));
                        }
                    }
                    Language longer;
                    for (const std::string& head : strings) {
                        for (const std::string& piece : pieces) {
                            if (head.size() + piece.size() <= kMaxLength)
                                longer.insert(head + piece);
                        }
                    }
                    strings = std::move(longer);
                }
                for (const std::string& s : strings)
                    changed = language[r].insert(s).second || changed;
            }
        }
    }
    return language;
}

Rules random_rules(RandomSource& random) {
    Rules rules(size_t(random.integer(1, 4)));
    for (auto& alternatives : rules) {
        alternatives.resize(size_t(random.integer(1, 3)));
        for (auto& alternative : alternatives) {
            for (int n = int(random.integer(0, 3)); n > 0; --n) {
                if (random.integer(0, 1) == 0) {
                    alternative.push_back(GrammarSymbol::of_rule(
                        int32_t(random.integer(0, int64_t(rules.size()) - 1))));
                    continue;
                }
                ByteSet set;
                for (const char c : kAlphabet) {
                    if (random.integer(0, 1) == 0) set.add(uint8_t(c));
                }
                if (set.empty()) set.add('a');
                alternative.push_back(GrammarSymbol::of_bytes(set));
            }
        }
    }
    return rules;
}

// The engine's grammar of `rules` (rule r named "r<r>", the root r0), or
// nullopt when the builder refuses it (left recursion).
std::optional<Grammar> engine_grammar(const Rules& rules) {
    GrammarBuilder builder;
    for (size_t r = 0; r < rules.size(); ++r) builder.rule(fmt::format("r{}", r));
    for (size_t r = 0; r < rules.size(); ++r) {
        for (const auto& alternative : rules[r]) builder.add_alternative(int32_t(r), alternative);
    }
    try {
        return builder.build("r0");
    } catch (const GrammarError&) {
        return std::nullopt;
    }
}

std::vector<std::string> all_strings() {
    std::vector<std::string> strings = {""};
    for (size_t i = 0; i < strings.size(); ++i) {
        if (strings[i].size() == kMaxLength) continue;
        for (const char c : kAlphabet) strings.push_back(strings[i] + c);
    }
    return strings;
}

TEST(GrammarOracle, AgreesWithBruteForceOnSmallGrammars) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<std::string> strings = all_strings();
    int num_grammars = 0;
    for (int trial = 0; trial < 400; ++trial) {
        const Rules rules = random_rules(random);
        const std::optional<Grammar> built = engine_grammar(rules);
        if (!built) continue;  // left-recursive: not a grammar the engine takes
        const Grammar& g = *built;
        ++num_grammars;
        SCOPED_TRACE("grammar\n" + g.to_string());
        const Language language = bounded_languages(rules)[0];
        Language prefixes;
        for (const std::string& s : language) {
            for (size_t n = 0; n <= s.size(); ++n) prefixes.insert(s.substr(0, n));
        }
        for (const std::string& s : strings) {
            ASSERT_EQ(test::grammar_accepts(g, s), language.count(s) == 1) << '"' << s << '"';
            if (prefixes.count(s) == 1) {
                ASSERT_TRUE(test::grammar_accepts_prefix(g, s)) << '"' << s << '"';
            }
        }
        EXPECT_FALSE(test::grammar_accepts_prefix(g, "d"));
    }
    EXPECT_GT(num_grammars, 100);
}

// PrefixContinuations (one prefix run, many continuations from its sets)
// answers as whole runs do, for every split of every short string.
TEST(GrammarOracle, ContinuationsAgreeWithWholeRuns) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<std::string> strings = all_strings();
    for (int trial = 0; trial < 60; ++trial) {
        const Rules rules = random_rules(random);
        const std::optional<Grammar> built = engine_grammar(rules);
        if (!built) continue;  // left-recursive: not a grammar the engine takes
        const Grammar& g = *built;
        SCOPED_TRACE("grammar\n" + g.to_string());
        for (size_t split = 0; split <= 2; ++split) {
            for (const std::string& prefix : strings) {
                if (prefix.size() != split) continue;
                test::PrefixContinuations continuations(g, prefix);
                for (const std::string& more : strings) {
                    ASSERT_EQ(continuations.accepts_prefix(more),
                              test::grammar_accepts_prefix(g, prefix + more))
                        << '"' << prefix << "\" + \"" << more << '"';
                    ASSERT_EQ(continuations.accepts(more), test::grammar_accepts(g, prefix + more))
                        << '"' << prefix << "\" + \"" << more << '"';
                }
            }
        }
    }
}

TEST(GrammarOracle, PrefixesNeverLeadIntoRulesThatDeriveNothing) {
    // "x" can only go on into `never`, which derives no finite string.
    GrammarBuilder builder;
    const int32_t root = builder.rule("root"), never = builder.rule("never");
    builder.add_alternative(root, {GrammarSymbol::of_byte('x'), GrammarSymbol::of_rule(never)});
    builder.add_alternative(root, {GrammarSymbol::of_byte('y')});
    builder.add_alternative(never, {GrammarSymbol::of_byte('n'), GrammarSymbol::of_rule(never)});
    const Grammar g = builder.build("root");
    EXPECT_FALSE(test::grammar_accepts_prefix(g, "x"));
    EXPECT_TRUE(test::grammar_accepts_prefix(g, ""));
    EXPECT_TRUE(test::grammar_accepts(g, "y"));
    std::mt19937_64 rng(1);
    EXPECT_EQ(test::sample_sentence(g, rng, 5), "y");
}

TEST(GrammarOracle, SamplesAreSentencesAndReachDeep) {
    // root ::= "(" root ")" | "" : samples nest, but stay within the depth.
    GrammarBuilder builder;
    const int32_t root = builder.rule("root");
    builder.add_alternative(root, {GrammarSymbol::of_byte('('), GrammarSymbol::of_rule(root),
                                   GrammarSymbol::of_byte(')')});
    builder.add_alternative(root, {});
    const Grammar g = builder.build("root");
    RandomSource random;
    SCOPED_TRACE(random.trace());
    size_t longest = 0;
    for (int i = 0; i < 200; ++i) {
        const std::string s = test::sample_sentence(g, random.engine(), 8);
        EXPECT_TRUE(test::grammar_accepts(g, s)) << s;
        EXPECT_LE(s.size(), 16u) << s;
        longest = std::max(longest, s.size());
    }
    EXPECT_GE(longest, 4u) << "the samples never nest";
}

}  // namespace
}  // namespace servelab
