// mask_walk_test.cpp — Lab 12's mask walk: the trie walk allows exactly the
// tokens whose every byte stays in the language, and the mask cache built on
// it agrees.
//
// Lab 12 (chapter 11.6, constrained decoding), the exercise in
// reference/constrained/mask_walk.cpp. Every mask is compared, token by
// token, with the definition computed by the Earley oracle (mask_oracle.h):
// after the output so far, a token is allowed when some sentence starts with
// output + its bytes. Grammars: JSON-like documents, hand grammars whose
// tokens cross rule boundaries or cut UTF-8 characters, and random ones;
// vocabularies are made up so that every case occurs. walk_token_trie is
// also called directly, from inner nodes and with visitors that prune, as
// the mask cache's builder calls it.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_matcher.h"
#include "reference/constrained/mask_walk.h"
#include "reference/constrained/utf8_ranges.h"
#include "tests/unit/grammar_test_util.h"
#include "tests/unit/mask_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::lit;
using test::ref;
using test::seq;
using test::set;

// The walk's mask at the matcher's state, against `want` (the definition).
void expect_walk_mask(const GrammarMatcher& m, const std::string& output, const TokenBitmask& want,
                      const std::string& where) {
    TokenBitmask mask;
    m.fill_next_token_bitmask_by_walk(mask);
    const std::string mistake =
        test::mask_mistake(m.compiled().grammar(), m.compiled().vocabulary(), output, mask, want);
    ASSERT_TRUE(mistake.empty()) << mistake << "; " << where;
}
void expect_walk_mask(const GrammarMatcher& m, const std::string& output,
                      const std::string& where) {
    expect_walk_mask(m, output,
                     test::oracle_mask(m.compiled().grammar(), m.compiled().vocabulary(), output),
                     where);
}

// The cached mask at the matcher's state, against `want` (the definition).
void expect_cached_mask(const GrammarMatcher& m, const std::string& output,
                        const TokenBitmask& want, const std::string& where) {
    TokenBitmask mask;
    m.fill_next_token_bitmask(mask);
    const std::string mistake =
        test::mask_mistake(m.compiled().grammar(), m.compiled().vocabulary(), output, mask, want);
    ASSERT_TRUE(mistake.empty())
        << mistake << "; "
        << "the cached mask (its entries were built by your walk_token_trie): " << where;
}
void expect_cached_mask(const GrammarMatcher& m, const std::string& output,
                        const std::string& where) {
    expect_cached_mask(m, output,
                       test::oracle_mask(m.compiled().grammar(), m.compiled().vocabulary(), output),
                       where);
}

// Random walks: at each state `check` the mask against the definition, then
// take a token the definition allows (past half the steps, an end token when
// one is allowed).
template <typename Check>
void random_walks(const std::shared_ptr<const CompiledGrammar>& compiled, int walks, int steps,
                  test::RandomSource& random, const std::string& name, Check check) {
    const TokenVocabulary& v = compiled->vocabulary();
    for (int w = 0; w < walks; ++w) {
        GrammarMatcher m(compiled);
        std::string output;
        for (int step = 0; step < steps && !m.is_terminated(); ++step) {
            const TokenBitmask allowed = test::oracle_mask(compiled->grammar(), v, output);
            check(m, output, allowed, name + " " + random.trace());
            if (::testing::Test::HasFatalFailure()) return;
            const TokenId t = test::draw_allowed(allowed, v, step > steps / 2, random.engine());
            if (t < 0) break;
            ASSERT_TRUE(m.accept_token(t))
                << test::shown_token(v, t) << " after " << test::shown_bytes(output);
            output += v.token_bytes[size_t(t)];
        }
    }
}

// Every string of 1 to 3 of `letters`, then random longer ones.
std::shared_ptr<const TokenVocabulary> letter_vocabulary(const std::string& letters, size_t longer,
                                                         std::mt19937_64& rng) {
    std::vector<std::string> tokens, level = {""};
    for (int length = 1; length <= 3; ++length) {
        std::vector<std::string> next;
        for (const std::string& s : level) {
            for (const char c : letters) next.push_back(s + c);
        }
        tokens.insert(tokens.end(), next.begin(), next.end());
        level = next;
    }
    std::set<std::string> seen(tokens.begin(), tokens.end());
    while (longer > 0) {
        std::string s;
        for (size_t n = 4 + rng() % 5; n > 0; --n) s += letters[rng() % letters.size()];
        if (seen.insert(s).second) tokens.push_back(s), --longer;
    }
    return test::vocabulary_of(tokens);
}

// root ::= "{" ws "\"k\"" ws ":" ws value ws "}" ; value ::= string | digits
Grammar key_value_grammar() {
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const int32_t ws = test::star(b, "ws", set(" "));
    const int32_t chars = test::star(b, "chars", set("a-z"));
    const int32_t digits = test::star(b, "digits", set("0-9"));
    const int32_t value = b.rule("value");
    b.add_alternative(value, seq({lit("\""), ref(chars), lit("\"")}));
    b.add_alternative(value, seq({set("1-9"), ref(digits)}));
    b.add_alternative(root, seq({lit("{"), ref(ws), lit("\"k\""), ref(ws), lit(":"), ref(ws),
                                 ref(value), ref(ws), lit("}")}));
    return b.build("root");
}

std::vector<std::string> key_value_tokens() {
    std::vector<std::string> tokens = {
        "{",   "}",    "\"",  ":",     " ",    "\":",  "\": ",    "\":\"", "\"}",   "\" }",
        ":\"", ": \"", "\"k", "\"k\"", "k\":", "ab",   "abc\"",   "a\"}",  "1",     "12",
        "12}", "1 }",  "0",   "01",    "{\"",  "{\"k", "{\"k\":", "b\":",  "ab\"",  "a}",
        "\"a", "x",    "}}",  "  ",    "\":1", "9}",   "k",       "\"\"",  "\"\"}", ":1}"};
    for (char c = 'a'; c <= 'e'; ++c) tokens.push_back(std::string(1, c));
    return tokens;
}

// ---------------------------------------------------------------- the walk's mask

TEST(MaskWalk, AllowsExactlyTheTokensWhoseBytesAllStayInTheLanguage) {
    test::RandomSource random;
    const auto vocabulary =
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(500, random.seed()));
    const auto compiled = test::compile_grammar(test::json_like_grammar(), vocabulary, false);
    random_walks(compiled, 3, 30, random, "JSON-like grammar",
                 [](const auto&... args) { expect_walk_mask(args...); });
}

TEST(MaskWalk, TokensThatCrossRuleBoundaries) {
    // A document fed one byte at a time: at every byte boundary the mask must
    // hold the tokens that finish a string and go on into ":" or "}".
    const Grammar g = key_value_grammar();
    const auto compiled = test::compile_grammar(g, test::vocabulary_of(key_value_tokens()), false);
    for (const std::string document : {"{\"k\":\"abc\"}", "{ \"k\" : 12 }"}) {
        GrammarMatcher m(compiled);
        for (size_t i = 0; i <= document.size(); ++i) {
            expect_walk_mask(m, document.substr(0, i), "in " + test::shown_bytes(document));
            if (HasFatalFailure()) return;
            if (i < document.size()) ASSERT_TRUE(m.accept_bytes(document.substr(i, 1)));
        }
    }
}

TEST(MaskWalk, TokensThatCutAUtf8Character) {
    // root ::= "\"" char* "\"" ; char: any character but '"' and controls.
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const int32_t character = add_codepoint_class_rule(b, {{0, 0x1F}, {'"', '"'}}, true, "char");
    const int32_t chars = test::star(b, "chars", ref(character));
    b.add_alternative(root, seq({lit("\""), ref(chars), lit("\"")}));
    const Grammar g = b.build("root");
    const std::vector<std::string> tokens = {"\"",
                                             "a",
                                             "é",
                                             "\xC3",
                                             "\xA9",
                                             "\xA9\"",
                                             "\xC3\xA9\xC3",
                                             "中",
                                             "\xE4",
                                             "\xE4\xB8",
                                             "\xB8\xAD",
                                             "\xAD",
                                             "\xAD\"",
                                             "\xC3\"",
                                             "\x80",
                                             "\xFF",
                                             "\xC0\x80",
                                             "\xED\xA0\x80",
                                             "😀",
                                             "\xF0\x9F",
                                             "\x98\x80",
                                             "\x9F\x98\x80\"",
                                             "é\"",
                                             "\"é"};
    const auto compiled = test::compile_grammar(g, test::vocabulary_of(tokens), false);
    for (const std::string document : {"\"é中😀\"", "\"aé\""}) {
        GrammarMatcher m(compiled);
        for (size_t i = 0; i <= document.size(); ++i) {
            expect_walk_mask(m, document.substr(0, i), "in " + test::shown_bytes(document));
            if (HasFatalFailure()) return;
            if (i < document.size()) ASSERT_TRUE(m.accept_bytes(document.substr(i, 1)));
        }
    }
}

TEST(MaskWalk, RandomGrammarsAndVocabularies) {
    test::RandomSource random;
    int walked = 0;
    for (int trial = 0; trial < 30; ++trial) {
        const Grammar g = test::random_productive_grammar(random.engine(), "abc");
        const auto vocabulary = letter_vocabulary("abcd", 40, random.engine());
        try {
            const auto compiled = test::compile_grammar(g, vocabulary, false);
            random_walks(compiled, 2, 8, random, "random grammar\n" + g.to_string(),
                         [](const auto&... args) { expect_walk_mask(args...); });
            ++walked;
        } catch (const GrammarError&) {  // a draw too ambiguous for the matcher's limits
        }
        if (HasFatalFailure()) return;
    }
    EXPECT_GE(walked, 20) << "most random grammars are not too ambiguous";
}

// fill_mask_by_walk itself, on a mask that holds every token before the call
// and on one scratch reused across states, as a matcher reuses it.
TEST(MaskWalk, ClearsTheMaskAndReusesItsScratch) {
    test::RandomSource random;
    const Grammar g = key_value_grammar();
    const auto vocabulary = test::vocabulary_of(key_value_tokens());
    const auto compiled = test::compile_grammar(g, vocabulary, false);
    MaskScratch scratch(compiled->grammar());
    StackStepper stepper(compiled->grammar());
    const StackSet start = stepper.initial_stacks();
    const std::vector<std::string> outputs = {
        "", "{\"k\":\"ab", "{", "{\"k\": 1", "{\"k\":\"", "", "{\"k\" :\"a\" ", "{\"k\":9"};
    for (const std::string& output : outputs) {
        StackSet stacks;
        ASSERT_TRUE(stepper.advance_bytes(start, output, stacks)) << output;
        TokenBitmask mask(vocabulary->size());
        for (TokenId t = 0; t < mask.size(); ++t) mask.set(t);
        fill_mask_by_walk(compiled->trie(), stacks, scratch, mask);
        // fill_mask_by_walk leaves the end tokens to its caller: set them as the matcher does.
        if (test::grammar_accepts(g, output)) {
            for (const TokenId t : vocabulary->end_tokens) mask.set(t);
        }
        const std::string mistake = test::mask_mistake(g, *vocabulary, output, mask);
        ASSERT_TRUE(mistake.empty())
            << mistake << "; "
            << "fill_mask_by_walk with one scratch for every call (clear the "
               "mask first; start each walk afresh from the given stacks)";
    }
}

// ---------------------------------------------------------------- walk_token_trie itself

// The bytes from `root` down to each node of its subtree (root's own: "").
std::map<int32_t, std::string> paths_below(const TokenTrie& trie, int32_t root) {
    std::map<int32_t, std::string> paths;
    std::vector<std::string> at_depth(1);
    const auto& nodes = trie.nodes();
    const int32_t base = nodes[size_t(root)].depth;
    for (int32_t n = root + 1; n < root + nodes[size_t(root)].subtree_size; ++n) {
        const size_t d = size_t(nodes[size_t(n)].depth - base);
        at_depth.resize(d + 1);
        at_depth[d] = at_depth[d - 1] + char(nodes[size_t(n)].byte);
        paths[n] = at_depth[d];
    }
    return paths;
}

// The trie node of `bytes` (-1: none).
int32_t node_of(const TokenTrie& trie, const std::string& bytes) {
    for (const auto& [node, path] : paths_below(trie, 0)) {
        if (path == bytes) return node;
    }
    return -1;
}

// From `root` with the stacks after output + root's bytes, every node whose
// bytes continue the language is visited, once, in depth-first order, with
// the stacks those bytes leave; no other node is.
void check_visits(const Grammar& g, const TokenTrie& trie, int32_t root,
                  const std::string& output) {
    StackStepper stepper(g);
    const std::map<int32_t, std::string> all = paths_below(trie, 0);
    const std::string root_bytes = root == 0 ? "" : all.at(root);
    StackSet stacks;
    ASSERT_TRUE(stepper.advance_bytes(stepper.initial_stacks(), output + root_bytes, stacks));
    MaskScratch scratch(g);
    const std::map<int32_t, std::string> below = paths_below(trie, root);
    std::vector<int32_t> visited;
    std::string wrong_stacks;
    walk_token_trie(trie, root, stacks, scratch, [&](int32_t node, const StackSet& at_node) {
        visited.push_back(node);
        StackSet expected;
        stepper.advance_bytes(stacks, below.at(node), expected);
        if (!expected.same_stacks(at_node) && wrong_stacks.empty()) {
            wrong_stacks = test::shown_bytes(below.at(node));
        }
        return true;
    });
    test::PrefixContinuations continuations(g, output + root_bytes);
    std::vector<int32_t> expected;
    for (const auto& [node, path] : below) {
        if (continuations.accepts_prefix(path)) expected.push_back(node);
    }
    const std::string where = "walking from node " + std::to_string(root) + " (bytes " +
                              test::shown_bytes(root_bytes) + ") after " +
                              test::shown_bytes(output);
    EXPECT_EQ(visited, expected)
        << where << ": the visited nodes must be exactly those whose bytes (from the root's) some "
        << "stack takes, in depth-first order, each once; the root itself is not visited";
    EXPECT_EQ(wrong_stacks, "") << where << ": the visitor got other stacks than the bytes "
                                << "from the root leave (each node's stacks are its parent's "
                                << "advanced by its own byte)";
}

TEST(MaskWalk, VisitsEveryNodeWhoseBytesAreTakenWithTheirStacks) {
    const Grammar g = key_value_grammar();
    const auto compiled = test::compile_grammar(g, test::vocabulary_of(key_value_tokens()), false);
    const TokenTrie& trie = compiled->trie();
    check_visits(g, trie, 0, "");
    check_visits(g, trie, 0, "{\"k\":\"a");
    check_visits(g, trie, 0, "{\"k\": 1");
    // From inner nodes, as the mask cache's builder walks past a rule's exit.
    check_visits(g, trie, node_of(trie, "\""), "{\"k\":\"ab");
    check_visits(g, trie, node_of(trie, "{\""), "");
    check_visits(g, trie, node_of(trie, "1"), "{\"k\":");
    check_visits(g, trie, node_of(trie, "a"), "{\"k\":\"");
}

TEST(MaskWalk, VisitsFromInnerNodesOfRandomTries) {
    test::RandomSource random;
    for (int trial = 0; trial < 20; ++trial) {
        const Grammar g = test::random_productive_grammar(random.engine(), "abc");
        const auto vocabulary = letter_vocabulary("abcd", 30, random.engine());
        const auto compiled = test::compile_grammar(g, vocabulary, false);
        const TokenTrie& trie = compiled->trie();
        for (const std::string root : {"", "a", "b", "ab", "c"}) {
            const int32_t node = root.empty() ? 0 : node_of(trie, root);
            if (!test::grammar_accepts_prefix(g, root)) continue;
            try {
                check_visits(g, trie, node, "");
            } catch (const GrammarError&) {  // a draw too ambiguous for the matcher's limits
            }
            if (HasFailure()) return;
        }
    }
}

TEST(MaskWalk, AVisitorThatSaysNoPrunesTheSubtree) {
    const Grammar g = key_value_grammar();
    const auto compiled = test::compile_grammar(g, test::vocabulary_of(key_value_tokens()), false);
    const TokenTrie& trie = compiled->trie();
    const std::map<int32_t, std::string> paths = paths_below(trie, 0);
    StackStepper stepper(g);
    StackSet stacks;
    ASSERT_TRUE(stepper.advance_bytes(stepper.initial_stacks(), "{\"k\":", stacks));
    MaskScratch scratch(g);
    std::vector<std::string> visited;
    // No to the nodes of the bytes "\"" and " ": nothing below them may be visited.
    walk_token_trie(trie, 0, stacks, scratch, [&](int32_t node, const StackSet&) {
        visited.push_back(paths.at(node));
        return paths.at(node) != "\"" && paths.at(node) != " ";
    });
    for (const std::string& path : visited) {
        EXPECT_FALSE(path.size() > 1 && (path[0] == '"' || path[0] == ' '))
            << "the walk went below a node whose visitor said no (" << test::shown_bytes(path)
            << "): the mask cache's builder prunes subtrees that way";
    }
    EXPECT_NE(std::find(visited.begin(), visited.end(), "\""), visited.end());
    EXPECT_NE(std::find(visited.begin(), visited.end(), "12"), visited.end())
        << "a sibling subtree of a pruned one must still be walked";
}

// ---------------------------------------------------------------- the cache on your walk

TEST(CachedMask, EqualsTheDefinitionOnJson) {
    test::RandomSource random;
    const auto vocabulary =
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(600, random.seed()));
    const auto compiled = test::compile_grammar(test::json_like_grammar(), vocabulary, true);
    random_walks(compiled, 3, 30, random, "JSON-like grammar",
                 [](const auto&... args) { expect_cached_mask(args...); });
}

TEST(CachedMask, EqualsTheDefinitionOnRandomGrammars) {
    test::RandomSource random;
    int walked = 0;
    for (int trial = 0; trial < 20; ++trial) {
        const Grammar g = test::random_productive_grammar(random.engine(), "abc");
        try {
            const auto compiled =
                test::compile_grammar(g, letter_vocabulary("abcd", 40, random.engine()), true);
            random_walks(compiled, 2, 8, random, "random grammar\n" + g.to_string(),
                         [](const auto&... args) { expect_cached_mask(args...); });
            ++walked;
        } catch (const GrammarError&) {  // a draw too ambiguous for the matcher's limits
        }
        if (HasFatalFailure()) return;
    }
    EXPECT_GE(walked, 13) << "most random grammars are not too ambiguous";
}

TEST(CachedMask, DecidesTokensThatRunPastTheirRuleByTheContext) {
    // The string rule is used in two places: after the first string a "," or
    // "]" follows, after a key a ":". A token "\"," is allowed only in the first.
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const int32_t chars = test::star(b, "chars", set("a-z"));
    const int32_t str = b.rule("str");
    b.add_alternative(str, seq({lit("\""), ref(chars), lit("\"")}));
    b.add_alternative(root, seq({lit("["), ref(str), lit(","), ref(str), lit("]")}));
    b.add_alternative(root, seq({lit("{"), ref(str), lit(":"), ref(str), lit("}")}));
    const Grammar g = b.build("root");
    const auto compiled = test::compile_grammar(
        g,
        test::vocabulary_of({"[", "{", "\"", "a", "ab", "\",", "\":", "\"]", "\"}", "b\",\"",
                             "b\":\"", ",", ":", "]", "}", "\"a", "a\"]", "a\"}"}),
        true);
    for (const std::string document : {"[\"ab\",\"a\"]", "{\"ab\":\"a\"}"}) {
        GrammarMatcher m(compiled);
        for (size_t i = 0; i <= document.size(); ++i) {
            expect_cached_mask(m, document.substr(0, i), "in " + test::shown_bytes(document));
            if (HasFatalFailure()) return;
            if (i < document.size()) ASSERT_TRUE(m.accept_bytes(document.substr(i, 1)));
        }
    }
}

}  // namespace
}  // namespace servelab
