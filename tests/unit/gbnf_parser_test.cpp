// gbnf_parser_test.cpp — GBNF text to grammar rules: what each grammar accepts, and every error's
// place.
//
// Lab 12 support tests (chapter 11.6, constrained decoding). Grammars in
// llama.cpp's GBNF (arithmetic, a JSON grammar, bounded lists, Unicode
// classes, the layout rules) are parsed and judged by the Earley oracle
// (grammar_oracle.h) on hand-picked strings, on random sentences
// (sample_sentence: always accepted, and every prefix of one is a prefix),
// and against independent judges where one exists: nlohmann::json for the
// JSON grammar, std::regex for a grammar that is regular. Every syntax
// error, undefined rule and left recursion must say where it is.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <regex>
#include <string>
#include <vector>

#include "reference/constrained/gbnf_parser.h"
#include "reference/constrained/utf8_ranges.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::error_of;
using test::grammar_accepts;
using test::grammar_accepts_prefix;
using test::RandomSource;

// A string as a JSON literal, so that newlines and odd bytes show.
std::string visible(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void expect_language(const Grammar& g, const std::vector<std::string>& accepted,
                     const std::vector<std::string>& rejected) {
    for (const std::string& s : accepted) {
        EXPECT_TRUE(grammar_accepts(g, s)) << visible(s) << " should be accepted";
    }
    for (const std::string& s : rejected) {
        EXPECT_FALSE(grammar_accepts(g, s)) << visible(s) << " should be rejected";
    }
}

// A random sentence is accepted, and so is each of its prefixes as a prefix.
void expect_samples_accepted(const Grammar& g, RandomSource& random, int num_samples,
                             int max_depth) {
    for (int i = 0; i < num_samples; ++i) {
        const std::string s = test::sample_sentence(g, random.engine(), max_depth);
        ASSERT_TRUE(grammar_accepts(g, s)) << "sampled sentence " << visible(s) << " rejected";
        const size_t cut = size_t(random.integer(0, int64_t(s.size())));
        EXPECT_TRUE(grammar_accepts_prefix(g, s.substr(0, cut)))
            << visible(s.substr(0, cut)) << " is a prefix of the sentence " << visible(s);
    }
}

// One edit of `s`: a byte deleted, inserted from `alphabet`, or replaced.
std::string mutated(const std::string& s, const std::string& alphabet, RandomSource& random) {
    std::string out = s;
    const char c = alphabet[size_t(random.integer(0, int64_t(alphabet.size()) - 1))];
    const auto at = size_t(random.integer(0, int64_t(s.size())));
    switch (random.integer(0, 2)) {
        case 0:
            if (at < out.size()) out.erase(at, 1);
            break;
        case 1:
            out.insert(at, 1, c);
            break;
        default:
            if (at < out.size()) out[at] = c;
            break;
    }
    return out;
}

const char* const kArithmetic = R"gbnf(
# Arithmetic, with precedence by layers of rules.
root   ::= expr
expr   ::= term (ws [-+] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= number | "(" ws expr ws ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
ws     ::= [ ]?
)gbnf";

TEST(GbnfParser, ArithmeticGrammar) {
    const Grammar g = parse_gbnf(kArithmetic);
    expect_language(g, {"1", "1+2", "1 + 2*3", "(1+2)/-3.25", "-(-4)", "((((7))))", "10 - 2 - 3"},
                    {"", "+", "1+", "(1", "1)", "1..2", "1  + 2", "1.", "--", "a"});
    EXPECT_TRUE(grammar_accepts_prefix(g, "(1 + 2 *"));
    EXPECT_FALSE(grammar_accepts_prefix(g, "(1 + )"));
    RandomSource random;
    SCOPED_TRACE(random.trace());
    expect_samples_accepted(g, random, 200, 14);
}

// A JSON grammar in the style of llama.cpp's grammars/json.gbnf: groups
// over several lines, escapes, bounded repetitions. (Exponents stay short and
// \u escapes name no surrogate: nlohmann refuses a number past a double's
// range and a lone surrogate.)
const char* const kJson = R"gbnf(
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" hex-bmp) # escapes
  )* "\"" ws
hex-bmp ::= [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}  # no surrogate

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,2})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)gbnf";

TEST(GbnfParser, JsonGrammarAcceptsOnlyJson) {
    const Grammar g = parse_gbnf(kJson);
    expect_language(g,
                    {R"({"a": [1, 2.5e3, "x\u00e9\n"], "b": {"c": null}})", "[]", "{}", "-0",
                     "\"h\xC3\xA9llo \xF0\x9F\x98\x80\"", "[true, false]"},
                    {"{", "[1,]", "{\"a\" 1}", "01", "\"\x01\"", "\"\\x\"", "tru", "[1 2]"});
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::string alphabet = "{}[],:\"\\ 0123456789.eE-+abcfnrstuelx\n";
    for (int i = 0; i < 300; ++i) {
        const std::string sentence = test::sample_sentence(g, random.engine(), 12);
        ASSERT_TRUE(grammar_accepts(g, sentence)) << visible(sentence);
        EXPECT_TRUE(nlohmann::json::accept(sentence)) << visible(sentence) << " is not JSON";
        const std::string near_miss = mutated(sentence, alphabet, random);
        if (grammar_accepts(g, near_miss)) {
            EXPECT_TRUE(nlohmann::json::accept(near_miss))
                << visible(near_miss) << " is accepted but is not JSON";
        }
    }
}

// A regular grammar, checked against std::regex (ECMAScript) on random strings.
TEST(GbnfParser, BoundedRepetitionsAgreeWithStdRegex) {
    const Grammar g = parse_gbnf(R"gbnf(
root ::= item{2,4} ("," item){0,3} tail "x"{3} "y"{1,} "z"{0,}
item ::= [a-c]
tail ::= "!"+ | "?"* "."
)gbnf");
    const std::regex same(R"re([a-c]{2,4}(,[a-c]){0,3}(!+|\?*\.)x{3}y+z*)re");
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::string alphabet = "abcd,!?.xyz";
    int num_accepted = 0;
    for (int i = 0; i < 2000; ++i) {
        std::string s = i % 2 == 0 ? test::sample_sentence(g, random.engine(), 12) : "";
        for (int edits = int(random.integer(0, 3)); edits > 0; --edits) {
            s = mutated(s, alphabet, random);
        }
        if (i % 2 == 1) {  // or a short random string
            for (int n = int(random.integer(0, 12)); n > 0; --n) s = mutated(s, alphabet, random);
        }
        const bool expected = std::regex_match(s, same);
        num_accepted += expected;
        EXPECT_EQ(grammar_accepts(g, s), expected) << visible(s);
    }
    EXPECT_GT(num_accepted, 200) << "too few matching strings drawn to test anything";
}

TEST(GbnfParser, EveryRepetitionCountIsExact) {
    for (int m = 0; m <= 4; ++m) {
        for (int n = m; n <= 5; ++n) {
            for (const bool unbounded : {false, true}) {
                const std::string count =
                    unbounded ? fmt::format("{{{},}}", m) : fmt::format("{{{},{}}}", m, n);
                const Grammar g = parse_gbnf("root ::= \"ab\"" + count + " \".\"");
                for (int k = 0; k <= 7; ++k) {
                    std::string s;
                    for (int i = 0; i < k; ++i) s += "ab";
                    const bool expected = k >= m && (unbounded || k <= n);
                    EXPECT_EQ(grammar_accepts(g, s + "."), expected) << count << " with k=" << k;
                }
            }
        }
    }
    const Grammar star = parse_gbnf("root ::= [a]* [b]+ [c]?");
    expect_language(star, {"b", "aabbb", "bc", "abc"}, {"", "a", "ac", "bcc", "ba"});
}

TEST(GbnfParser, TheLargestRepetitionCountParses) {
    const Grammar g = parse_gbnf(fmt::format("root ::= \"a\"{{{}}}", kMaxGbnfRepetition));
    EXPECT_TRUE(grammar_accepts(g, std::string(size_t(kMaxGbnfRepetition), 'a')));
    EXPECT_FALSE(grammar_accepts(g, std::string(size_t(kMaxGbnfRepetition) - 1, 'a')));
}

TEST(GbnfParser, UnicodeClassesAndAnyCharacter) {
    const Grammar g = parse_gbnf(R"gbnf(
root  ::= greek+ " " [^a-z\n]? "→" . [\u00e0-\u00ff\U0001F600-\U0001F64F]
greek ::= [α-ω]
)gbnf");
    expect_language(g, {"αβ →xé", "ω É→\n\xF0\x9F\x98\x80", "αω 9→😀à", "α →\xF0\x9F\xA6\x80é"},
                    {"αβ →xe", "ab →xé", "αβ x→xé", "αβ \n→xé", "α →é", "Α →xé",
                     "α →\xE2\x82é"});  // a cut-short character
    RandomSource random;
    SCOPED_TRACE(random.trace());
    expect_samples_accepted(g, random, 200, 10);
}

TEST(GbnfParser, LiteralEscapesAndCommentsAndLayout) {
    const Grammar g = parse_gbnf(
        "root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\" tail  # a comment\n"
        "\n"
        "# a comment line, then a rule on several lines\n"
        "tail ::= \"-\" | \"[\" (\n"
        "    \"x\" |    # inside a group, a newline is only space\n"
        "    \"y\"\n"
        ")* \"]\"\n"
        "       | \"!\"     # a line that starts with '|' goes on with the rule\n");
    const std::string head = "A\xC3\xA9\xF0\x9F\x98\x80\t\n\r\\\"";
    expect_language(g, {head + "-", head + "[]", head + "[xyx]", head + "!"},
                    {head, head + "[z]", "A-", head + "-!"});
}

TEST(GbnfParser, EmptyAlternativesAndEmptyLiterals) {
    const Grammar g = parse_gbnf("root ::= \"a\" opt \"\" \"b\"\nopt ::= \"x\" |");
    expect_language(g, {"ab", "axb"}, {"a", "axxb", ""});
    const Grammar empty = parse_gbnf("root ::= \"\"");
    expect_language(empty, {""}, {"a"});
}

TEST(GbnfParser, HelperRulesNeverTakeTheTextsNames) {
    // The repetition in root would be named "root-loop" if that were free.
    const Grammar g = parse_gbnf("root ::= [a]* root-loop\nroot-loop ::= \"x\"");
    expect_language(g, {"x", "aax"}, {"aa", ""});
}

TEST(GbnfParser, AddRulesUsesAndRefusesTheBuildersRules) {
    GrammarBuilder builder;
    add_codepoint_class_rule(builder, {{'0', '9'}}, false, "digit");
    add_gbnf_rules(builder, "root ::= digit+ \"%\"");
    const Grammar g = builder.build("root");
    expect_language(g, {"1%", "100%"}, {"%", "1"});

    GrammarBuilder again;
    add_codepoint_class_rule(again, {{'0', '9'}}, false, "digit");
    const std::string message = error_of([&] { add_gbnf_rules(again, "digit ::= \"x\""); });
    EXPECT_NE(message.find("grammar line 1 column 1: rule 'digit' is already defined"),
              std::string::npos)
        << message;
}

struct ErrorCase {
    std::string text;
    std::string message;  // the whole error message, or its start
};

TEST(GbnfParser, EveryErrorSaysWhere) {
    const std::vector<ErrorCase> cases = {
        {"root ::= \"abc", "grammar line 1 column 10: unterminated literal"},
        {"root ::= \"abc\nx ::= \"y\"", "grammar line 1 column 10: unterminated literal"},
        {"root ::= [abc", "grammar line 1 column 10: unterminated character class"},
        {"root ::= (\"a\" | \"b\"", "grammar line 1 column 10: the group is never closed"},
        {"root ::= (\"a\" ]",
         "grammar line 1 column 15: expected ')' to close the group at "
         "line 1 column 10, found ']'"},
        {"root ::= \"a\" )", "grammar line 1 column 14: unexpected ')' in rule 'root'"},
        {"root = \"a\"", "grammar line 1 column 6: expected '::=' after the rule name 'root'"},
        {"::= \"a\"", "grammar line 1 column 1: expected a rule name, found ':'"},
        {"root ::= *\"a\"", "grammar line 1 column 10: '*' has nothing before it to repeat"},
        {"root ::= \"a\"{", "grammar line 1 column 14: expected a number"},
        {"root ::= \"a\"{2", "grammar line 1 column 15: expected ',' or '}'"},
        {"root ::= \"a\"{2,", "grammar line 1 column 16: expected '}'"},
        {"root ::= \"a\"{3,1}",
         "grammar line 1 column 13: the repetition {3,1} has its "
         "minimum over its maximum"},
        {"root ::= \"a\"{10001}", "grammar line 1 column 14: a repetition count over the limit"},
        {"root ::= \"a\"{99999999999999999999}", "grammar line 1 column 14: a repetition count"},
        {"root ::= \"\\q\"", "grammar line 1 column 11: unknown escape"},
        {"root ::= \"\\x4\"", "grammar line 1 column 13: the escape \\x needs 2 hex digits"},
        {"root ::= \"\\uD800\"", "grammar line 1 column 11: the escape names U+D800"},
        {"root ::= \"\\U00110000\"", "grammar line 1 column 11: the escape names U+110000"},
        {"root ::= [z-a]", "grammar line 1 column 11: the range U+007A-U+0061 runs backwards"},
        {"root ::= []", "grammar line 1 column 10: the character class matches no character"},
        {"root ::= \"\xC3\"", "grammar line 1 column 11: malformed UTF-8"},
        {"root ::= \"\xC0\xAF\"", "grammar line 1 column 11: malformed UTF-8"},
        {"item ::= \"a\"", "grammar line 1 column 1: the grammar has no rule 'root'"},
        {"", "grammar line 1 column 1: the grammar has no rule 'root'"},
        {"root ::= a\na ::= \"x\" b",
         "grammar line 2 column 11: rule 'b' is used here but "
         "never defined"},
        {"root ::= \"a\"\nroot ::= \"b\"",
         "grammar line 2 column 1: rule 'root' is defined "
         "twice (first at line 1 column 1)"},
        {"root ::= (\"a\"?)*",
         "grammar line 1 column 16: the repeated item can match the "
         "empty string"},
        {"root ::= \"\"+", "grammar line 1 column 12: the repeated item can match the empty"},
        {"root ::= [α-ω]日", "grammar line 1 column 15: unexpected '日' in rule 'root'"},
    };
    for (const ErrorCase& c : cases) {
        const std::string message = error_of([&] { parse_gbnf(c.text); });
        EXPECT_EQ(message.substr(0, c.message.size()), c.message) << "grammar " << visible(c.text);
    }
}

TEST(GbnfParser, LeftRecursionIsRefusedNamingTheCycle) {
    const std::vector<ErrorCase> cases = {
        {"root ::= root \"a\" | \"b\"",
         "grammar line 1 column 10: rule 'root' is left-recursive (root -> root)"},
        {"root ::= expr\nexpr ::= term \"+\" | \"x\"\nterm ::= expr \"*\"",
         "grammar line 3 column 10: rule 'expr' is left-recursive (expr -> term -> expr)"},
        {"root ::= \"a\"? ws? root \"b\" | \"c\"\nws ::= \" \"",
         "grammar line 1 column 19: rule 'root' is left-recursive (root -> root)"},
        {"root ::= (\"x\" | root \"y\")",
         "grammar line 1 column 17: rule 'root' is left-recursive (root -> root)"},
    };
    for (const ErrorCase& c : cases) {
        const std::string message = error_of([&] { parse_gbnf(c.text); });
        EXPECT_EQ(message.substr(0, c.message.size()), c.message) << "grammar " << visible(c.text);
    }
    // Right recursion is fine.
    const Grammar g = parse_gbnf("root ::= \"a\" root | \"b\"");
    expect_language(g, {"b", "aab"}, {"a", "ba"});
}

TEST(GbnfParser, LimitsKeepHostileGrammarsSmall) {
    std::string deep = "root ::= ";
    for (int i = 0; i < 101; ++i) deep += "(";
    EXPECT_NE(error_of([&] { parse_gbnf(deep); }).find("groups nested more than 100 deep"),
              std::string::npos);
    // Each rule unrolls to about 40,000 elements; the seventh goes over.
    std::string large = "root ::= r0\n";
    for (int i = 0; i < 7; ++i) large += fmt::format("r{} ::= [a]{{0,10000}}\n", i);
    const std::string message = error_of([&] { parse_gbnf(large); });
    const std::string expected = "grammar line 8 column 11: the grammar is too large";
    EXPECT_EQ(message.substr(0, expected.size()), expected) << message;
}

TEST(GbnfParser, ALongChainOfRulesIsCheckedWithoutRecursion) {
    // r0 ::= r1, r1 ::= r2, ...: every check walks the chain without a call
    // per rule (100,000 nested calls would overflow the stack) and in
    // linear time (a naive fixed point for nullability would take n passes).
    constexpr int kLength = 100000;
    std::string chain = "root ::= r0\n";
    for (int i = 0; i < kLength; ++i) chain += fmt::format("r{} ::= r{}\n", i, i + 1);
    const Grammar g = parse_gbnf(chain + fmt::format("r{} ::= \"\"\n", kLength));
    EXPECT_EQ(g.num_rules(), size_t(kLength) + 2);
    EXPECT_TRUE(g.nullable(g.root_rule()));  // (the oracle's plain fixed point would crawl here)
    // Closed into a cycle, it is left recursion, named in one short line.
    const std::string message =
        error_of([&] { parse_gbnf(chain + fmt::format("r{} ::= r0 \"x\"\n", kLength)); });
    EXPECT_NE(message.find("rule 'r0' is left-recursive (r0 -> r1 -> r2 -> r3 -> r4 -> ... "
                           "(99992 more) -> "),
              std::string::npos)
        << message.substr(0, 300);
    EXPECT_LT(message.size(), 400u);
}

TEST(GbnfParser, MalformedTextOnlyEverThrowsGrammarError) {
    // Random edits of real grammars: parsed, or refused with a GrammarError.
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::string alphabet = "()[]{}|*+?\"\\#:=-^.,0123456789 \n\tabxu\xC3\xA9";
    for (const char* text : {kArithmetic, kJson}) {
        for (int i = 0; i < 300; ++i) {
            std::string s = text;
            for (int edits = int(random.integer(1, 4)); edits > 0; --edits) {
                s = mutated(s, alphabet, random);
            }
            try {
                parse_gbnf(s);
            } catch (const GrammarError& e) {
                EXPECT_EQ(std::string(e.what()).rfind("grammar ", 0), 0u) << e.what();
            }
        }
    }
}

}  // namespace
}  // namespace servelab
