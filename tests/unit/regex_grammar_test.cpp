// regex_grammar_test.cpp — a regex as grammar rules accepts exactly what Python's re.fullmatch
// does.
//
// Lab 12 support tests (chapter 11.6, constrained decoding). The verdicts
// come from Python: tools/goldens/make_regex_goldens.py ran
// re.fullmatch(pattern, s, re.ASCII) over a hundred patterns that cover
// every construct of the subset, on strings drawn to match them, near
// misses, and random ones (data/golden/constrained/regex_cases.json). The
// Earley oracle (grammar_oracle.h) judges regex_grammar(pattern) on every
// string and must agree with every verdict; the patterns Python rejects
// must be rejected too. Further tests pin down what the subset refuses (by
// name), the limits, choice_grammar, and rules added to a shared builder.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "reference/constrained/regex_grammar.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using nlohmann::json;
using test::error_of;
using test::grammar_accepts;

constexpr const char* kGoldenPath = "data/golden/constrained/regex_cases.json";

const json& goldens() {
    static const json golden = [] {
        std::ifstream in(test::source_path(kGoldenPath), std::ios::binary);
        if (!in) throw std::runtime_error(std::string("cannot read ") + kGoldenPath);
        return json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
    }();
    return golden;
}

// A string as a JSON literal, so that newlines and odd characters show.
std::string visible(const std::string& text) {
    return json(text).dump();
}

TEST(RegexGrammar, AgreesWithPythonOnEveryGoldenString) {
    ASSERT_GE(goldens().at("cases").size(), 60u);
    for (const json& c : goldens().at("cases")) {
        const std::string pattern = c.at("pattern");
        SCOPED_TRACE("pattern " + visible(pattern));
        Grammar g;
        try {
            g = regex_grammar(pattern);
        } catch (const GrammarError& e) {
            ADD_FAILURE() << "refused a pattern Python takes: " << e.what();
            continue;
        }
        for (const std::string s : c.at("accept")) {
            EXPECT_TRUE(grammar_accepts(g, s)) << visible(s) << " matches in Python";
        }
        for (const std::string s : c.at("reject")) {
            EXPECT_FALSE(grammar_accepts(g, s)) << visible(s) << " does not match in Python";
        }
    }
}

TEST(RegexGrammar, RejectsWhatPythonRejects) {
    for (const json& c : goldens().at("invalid")) {
        const std::string pattern = c.at("pattern");
        EXPECT_THROW(regex_grammar(pattern), GrammarError)
            << visible(pattern) << " (Python: " << c.at("python_error").get<std::string>() << ")";
    }
}

TEST(RegexGrammar, RandomSentencesOfEveryGoldenPatternAreAccepted) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    for (const json& c : goldens().at("cases")) {
        const Grammar g = regex_grammar(c.at("pattern").get<std::string>());
        for (int i = 0; i < 5; ++i) {
            const std::string s = test::sample_sentence(g, random.engine(), 10);
            EXPECT_TRUE(grammar_accepts(g, s)) << visible(s) << " of " << c.at("pattern");
        }
    }
}

struct Refused {
    std::string pattern;
    std::string message;  // the whole message, or its start
};

TEST(RegexGrammar, RefusesWhatItCannotEnforceByName) {
    const std::vector<Refused> cases = {
        {"a(?=b)", "regex column 2: a lookahead (?=...) is not supported"},
        {"a(?!b)", "regex column 2: a negative lookahead (?!...) is not supported"},
        {"(?<=a)b", "regex column 1: a lookbehind (?<=...) is not supported"},
        {"(?<!a)b", "regex column 1: a negative lookbehind (?<!...) is not supported"},
        {"(a)\\1", "regex column 4: a backreference (or octal escape) \\1 is not supported"},
        {"(?P<x>a)(?P=x)", "regex column 9: a backreference (?P=name) is not supported"},
        {"(?i)abc", "regex column 1: an inline flag such as (?i) or (?s:...) is not supported"},
        {"(?s:.)", "regex column 1: an inline flag"},
        {"(?-i:a)", "regex column 1: an inline flag"},
        {"a*+", "regex column 2: a possessive quantifier"},
        {"a{2}+", "regex column 2: a possessive quantifier"},
        {"(?>a)", "regex column 1: an atomic group (?>...) is not supported"},
        {"(?#note)a", "regex column 1: a comment (?#...) is not supported"},
        {"(?(1)a|b)", "regex column 1: a conditional"},
        {"\\bword", "regex column 1: a word boundary \\b is not supported"},
        {"a\\B", "regex column 2: \\B (not a word boundary) is not supported"},
        {"\\Aabc", "regex column 1: the anchor \\A is not supported"},
        {"abc\\Z", "regex column 4: the anchor \\Z is not supported"},
        {"a^b", "regex column 2: the anchor '^' is supported only at the start"},
        {"a$b", "regex column 2: the anchor '$' is supported only at the end"},
        {"(^a)", "regex column 2: the anchor '^'"},
        {"(a$)", "regex column 3: the anchor '$'"},
        {"\\N{EM DASH}", "regex column 1: a named character \\N{...} is not supported"},
        {"[^\\s\\S]", "regex column 1: the character class matches no character"},
        {"\\ud800", "regex column 1: the escape names the surrogate U+D800"},
        {"(?Q)", "regex column 1: unknown extension: '(?' before 'Q'"},
        {"(?", "regex column 1: unknown extension: '(?' before the end of the text"},
        {"a\xC3", "regex column 2: malformed UTF-8"},
    };
    for (const Refused& c : cases) {
        const std::string message = error_of([&] { regex_grammar(c.pattern); });
        EXPECT_EQ(message.substr(0, c.message.size()), c.message)
            << "pattern " << visible(c.pattern);
    }
}

TEST(RegexGrammar, LimitsKeepHostilePatternsSmall) {
    EXPECT_NO_THROW(regex_grammar(fmt::format("a{{{}}}", kMaxRegexRepetition)));
    const std::string over = error_of([] { regex_grammar("a{1001}"); });
    EXPECT_EQ(over, "regex column 2: a repetition count over the limit of 1000");
    EXPECT_NE(
        error_of([] { regex_grammar("a{2,99999999999999999999999}"); }).find("over the limit"),
        std::string::npos);
    const std::string long_pattern(kMaxRegexBytes + 1, 'a');
    EXPECT_EQ(error_of([&] { regex_grammar(long_pattern); }),
              fmt::format("regex: the pattern is {} bytes, over the limit of {}",
                          kMaxRegexBytes + 1, kMaxRegexBytes));
    std::string deep;
    for (int i = 0; i < 101; ++i) deep += "(";
    EXPECT_NE(error_of([&] { regex_grammar(deep); }).find("groups nested more than 100 deep"),
              std::string::npos);
    // Each a{0,1000} unrolls to 4,000 elements; 40 of them go over.
    std::string large;
    for (int i = 0; i < 40; ++i) large += "a{0,1000}";
    EXPECT_NE(error_of([&] { regex_grammar(large); }).find("the pattern is too large"),
              std::string::npos);
}

TEST(RegexGrammar, RepeatedItemsThatMatchNothingStayFinite) {
    // (a*)* and friends would be left-recursive as written; the rewrite keeps
    // them to the same strings (and the grammar builds: no left recursion).
    for (const char* pattern : {"(a*)*", "(a?)+", "(|a)*", "(()|a){2,}", "(a*b*)*", "()*"}) {
        const Grammar g = regex_grammar(pattern);
        EXPECT_TRUE(grammar_accepts(g, "")) << pattern;
    }
    EXPECT_TRUE(grammar_accepts(regex_grammar("(a*b*)*"), "abbaab"));
    EXPECT_FALSE(grammar_accepts(regex_grammar("()*"), "a"));
}

TEST(RegexGrammar, AddedRulesLiveBesideOthers) {
    GrammarBuilder builder;
    const int32_t digits = add_regex_rule(builder, "[0-9]+", "number");
    const int32_t word = add_regex_rule(builder, "[a-z]+", "number");  // the same hint
    EXPECT_NE(digits, word);
    const int32_t root = builder.rule("root");
    builder.add_alternative(root, {GrammarSymbol::of_rule(digits), GrammarSymbol::of_byte('='),
                                   GrammarSymbol::of_rule(word)});
    const Grammar g = builder.build("root");
    EXPECT_TRUE(grammar_accepts(g, "12=ab"));
    EXPECT_FALSE(grammar_accepts(g, "ab=12"));
}

TEST(RegexGrammar, MalformedPatternsOnlyEverThrowGrammarError) {
    // Random edits of the golden patterns: a grammar, or a GrammarError.
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::string alphabet = "()[]{}|*+?^$.\\-,:<>=!#PdwsbxuU0123456789a\xC3\xA9";
    for (const json& c : goldens().at("cases")) {
        for (int i = 0; i < 20; ++i) {
            std::string pattern = c.at("pattern");
            for (int edits = int(random.integer(1, 3)); edits > 0; --edits) {
                const auto at = size_t(random.integer(0, int64_t(pattern.size())));
                const char ch = alphabet[size_t(random.integer(0, int64_t(alphabet.size()) - 1))];
                if (random.integer(0, 1) == 0 && at < pattern.size()) {
                    pattern.erase(at, 1);
                } else {
                    pattern.insert(at, 1, ch);
                }
            }
            try {
                regex_grammar(pattern);
            } catch (const GrammarError& e) {
                EXPECT_EQ(std::string(e.what()).rfind("regex column ", 0), 0u) << e.what();
            }
        }
    }
}

TEST(ChoiceGrammar, AcceptsExactlyTheChoices) {
    const std::vector<std::string> choices = {"yes", "no", "", "yes!", "日本"};
    const Grammar g = choice_grammar(choices);
    for (const std::string& c : choices) EXPECT_TRUE(grammar_accepts(g, c)) << visible(c);
    for (const char* s : {"ye", "yes!!", "No", "日", "noyes"}) {
        EXPECT_FALSE(grammar_accepts(g, s)) << visible(s);
    }
    EXPECT_EQ(error_of([] { choice_grammar({}); }), "a list of choices needs at least one choice");
}

}  // namespace
}  // namespace servelab
