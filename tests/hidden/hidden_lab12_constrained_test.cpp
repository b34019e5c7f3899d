// hidden_lab12_constrained_test.cpp — the course's hidden tests for Lab 12
// (constrained decoding): the handout's contracts on inputs the public tests
// do not use.
//
// Lab 12 (chapter 11.6). Not in the students' copy (docs/teaching.md,
// "Hidden tests"). The mask walk on grammars from the regex and GBNF front
// ends, tries with long shared prefixes, every inner node as a walk's root,
// one scratch across unrelated states; accept_token, accept_bytes, end
// tokens, fork and rollback interleaved at random against a model of the
// output; objects and arrays nested in each other, objects of seven
// properties, arrays whose minItems reaches past a prefix that ends early.
// Judges: the Earley oracle (masks and states) and the validator oracle.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/gbnf_parser.h"
#include "reference/constrained/grammar_matcher.h"
#include "reference/constrained/json_schema_grammar.h"
#include "reference/constrained/mask_walk.h"
#include "reference/constrained/regex_grammar.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/grammar_test_util.h"
#include "tests/unit/json_schema_validator_oracle.h"
#include "tests/unit/mask_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

// Tokens sharing long prefixes: every prefix of each word, and each word
// with a few random tails.
std::shared_ptr<const TokenVocabulary> deep_vocabulary(const std::vector<std::string>& words,
                                                       std::mt19937_64& rng) {
    std::vector<std::string> tokens;
    std::set<std::string> seen;
    const auto add = [&](const std::string& t) {
        if (!t.empty() && seen.insert(t).second) tokens.push_back(t);
    };
    for (int b = 0x20; b < 0x7F; ++b) add(std::string(1, char(b)));
    for (const std::string& w : words) {
        for (size_t n = 1; n <= w.size(); ++n) add(w.substr(0, n));
        for (int k = 0; k < 4; ++k) add(w + words[rng() % words.size()].substr(0, 1 + rng() % 3));
    }
    return test::vocabulary_of(tokens);
}

// Walks of tokens the definition allows; at each state both masks against it.
void check_masks_along_walks(const std::shared_ptr<const CompiledGrammar>& walked,
                             const std::shared_ptr<const CompiledGrammar>& cached, int walks,
                             int steps, test::RandomSource& random, const std::string& name) {
    const Grammar& g = walked->grammar();
    const TokenVocabulary& v = walked->vocabulary();
    for (int w = 0; w < walks; ++w) {
        GrammarMatcher by_walk(walked), by_cache(cached);
        std::string output;
        for (int step = 0; step < steps; ++step) {
            const TokenBitmask want = test::oracle_mask(g, v, output);
            TokenBitmask got;
            by_walk.fill_next_token_bitmask_by_walk(got);
            ASSERT_TRUE(test::mask_mistake(g, v, output, got, want).empty())
                << test::mask_mistake(g, v, output, got, want) << "; "
                << "the walk's mask, " << name << "; " << random.trace();
            by_cache.fill_next_token_bitmask(got);
            ASSERT_TRUE(test::mask_mistake(g, v, output, got, want).empty())
                << test::mask_mistake(g, v, output, got, want) << "; "
                << "the cached mask, " << name << "; " << random.trace();
            const TokenId t = test::draw_allowed(want, v, step > steps / 2, random.engine());
            if (t < 0 || test::is_end_token(v, t)) break;
            ASSERT_TRUE(by_walk.accept_token(t) && by_cache.accept_token(t));
            output += v.token_bytes[size_t(t)];
        }
    }
}

TEST(HiddenLab12MaskWalk, RegexGrammarsOnDeepTries) {
    test::RandomSource random;
    const auto v = deep_vocabulary({"abcabcabd", "abcd", "2024-01-", "INFO", "ERROR", "WARN",
                                    "error", "0123456789", "x.y.z", "aaaaaaaa"},
                                   random.engine());
    for (const char* pattern :
         {R"((abc)+d?[0-9]{2,4})", R"(\d{4}-\d{2}-\d{2} (INFO|WARN|ERROR) [a-z]+\.)",
          R"([a-c]*(x\.y\.z|abd)+)", R"((a|aa|aaa)*b?)"}) {
        const Grammar g = regex_grammar(pattern);
        check_masks_along_walks(test::compile_grammar(g, v, false),
                                test::compile_grammar(g, v, true), 3, 20, random,
                                std::string("regex ") + pattern);
        if (HasFatalFailure()) return;
    }
}

TEST(HiddenLab12MaskWalk, GbnfGrammarsWithNestingAndUtf8) {
    test::RandomSource random;
    const std::string gbnf = R"G(root ::= "(" list ")"
list ::= item ("," item)*
item ::= [a-zé]+ | "(" list ")" | "中" [0-9]?
)G";
    const Grammar g = parse_gbnf(gbnf);
    const auto v = test::vocabulary_of({"(",
                                        ")",
                                        ",",
                                        "a",
                                        "b",
                                        "é",
                                        "\xC3",
                                        "\xA9",
                                        "中",
                                        "\xE4\xB8",
                                        "\xAD",
                                        "\xAD"
                                        "1",
                                        "((",
                                        "))",
                                        ")(",
                                        "),",
                                        ",(",
                                        "ab",
                                        "aé",
                                        "a,",
                                        "a)",
                                        "é)",
                                        "\xA9)",
                                        "(a",
                                        "(é",
                                        "z",
                                        "1",
                                        "12",
                                        "中1",
                                        "中,",
                                        ")))",
                                        "a,b",
                                        ",\xC3",
                                        "x"});
    check_masks_along_walks(test::compile_grammar(g, v, false), test::compile_grammar(g, v, true),
                            6, 24, random, "GBNF");
}

// Every inner node as the root of a walk: visited exactly the nodes below
// it whose bytes continue the language, with the stacks those bytes leave.
TEST(HiddenLab12MaskWalk, EveryInnerNodeAsTheRoot) {
    test::RandomSource random;
    const Grammar g = regex_grammar(R"((ab|abc|b)*c?[0-9]{0,2})");
    const auto v = deep_vocabulary({"ababab", "abcab", "bbbc", "c12", "abc9"}, random.engine());
    const auto compiled = test::compile_grammar(g, v, false);
    const TokenTrie& trie = compiled->trie();
    const auto& nodes = trie.nodes();
    // The bytes of each node from the trie's root.
    std::vector<std::string> path(nodes.size());
    std::vector<std::string> at_depth(1);
    for (size_t n = 1; n < nodes.size(); ++n) {
        const size_t d = size_t(nodes[n].depth);
        at_depth.resize(d + 1);
        at_depth[d] = at_depth[d - 1] + char(nodes[n].byte);
        path[n] = at_depth[d];
    }
    StackStepper stepper(g);
    MaskScratch scratch(g);  // one scratch for every walk, as the cache's builder keeps one
    for (int32_t root = 0; root < int32_t(nodes.size()); ++root) {
        if (!test::grammar_accepts_prefix(g, path[size_t(root)])) continue;
        StackSet stacks;
        ASSERT_TRUE(stepper.advance_bytes(stepper.initial_stacks(), path[size_t(root)], stacks));
        std::vector<int32_t> visited;
        bool stacks_right = true;
        walk_token_trie(trie, root, stacks, scratch, [&](int32_t node, const StackSet& at) {
            visited.push_back(node);
            StackSet want;
            stepper.advance_bytes(stepper.initial_stacks(), path[size_t(node)], want);
            stacks_right = stacks_right && want.same_stacks(at);
            return true;
        });
        std::vector<int32_t> expected;
        for (int32_t n = root + 1; n < root + nodes[size_t(root)].subtree_size; ++n) {
            if (test::grammar_accepts_prefix(g, path[size_t(n)])) expected.push_back(n);
        }
        ASSERT_EQ(visited, expected) << "walking below node " << root << " ("
                                     << test::shown_bytes(path[size_t(root)]) << ")";
        ASSERT_TRUE(stacks_right) << "a visitor got the wrong stacks below node " << root;
    }
}

// One scratch, states that differ below the same trie nodes: a walk must
// never reuse stacks made under another parent, or in an earlier walk.
TEST(HiddenLab12MaskWalk, OneScratchAcrossUnrelatedStates) {
    test::RandomSource random;
    // After "x" a letter is followed by digits; after "y" by letters: the
    // same byte takes the same stacks' positions, but leaves other stacks.
    const Grammar g = parse_gbnf(R"(root ::= "x" [a-c] [0-9]* | "y" [a-c] [a-z]* | [a-c] "!")");
    const auto v =
        test::vocabulary_of({"x",  "y",  "a", "b",  "c",  "a1", "b1", "c1", "ab",  "bb", "cb",
                             "a!", "b!", "1", "12", "bz", "!",  "xa", "ya", "xa1", "yab"});
    const auto compiled = test::compile_grammar(g, v, false);
    MaskScratch scratch(g);
    StackStepper stepper(g);
    for (int round = 0; round < 40; ++round) {
        const std::string output = std::vector<std::string>{
            "", "x", "y", "xa", "ya", "x", "y"}[size_t(random.integer(0, 6))];
        StackSet stacks;
        ASSERT_TRUE(stepper.advance_bytes(stepper.initial_stacks(), output, stacks));
        TokenBitmask mask(v->size());
        for (TokenId t = 0; t < mask.size(); t += 1 + TokenId(round % 3))
            mask.set(t);  // stale bits
        fill_mask_by_walk(compiled->trie(), stacks, scratch, mask);
        if (test::grammar_accepts(g, output)) {
            for (const TokenId t : v->end_tokens) mask.set(t);
        }
        ASSERT_TRUE(test::mask_mistake(g, *v, output, mask).empty())
            << test::mask_mistake(g, *v, output, mask) << "; "
            << "round " << round << ", one scratch for every walk";
    }
}

// ---------------------------------------------------------------- matcher

// "" when `m` stands after `output`: probes of every printable byte and a
// few pairs against the oracle, and can_terminate.
std::string state_difference(const GrammarMatcher& m, const std::string& output) {
    test::PrefixContinuations c(m.compiled().grammar(), output);
    if (m.can_terminate() != c.accepts("")) return "can_terminate after " + output;
    for (int b = 0x20; b < 0x7F; ++b) {
        const std::string p(1, char(b));
        GrammarMatcher fork = m.fork();
        if (fork.accept_bytes(p) != c.accepts_prefix(p)) {
            return "byte " + test::shown_bytes(p) + " after " + test::shown_bytes(output);
        }
    }
    return "";
}

TEST(HiddenLab12Matcher, TokensBytesRollbackAndForksInterleaved) {
    test::RandomSource random;
    const Grammar g = parse_gbnf(R"G(root ::= "{" ws pair ("," ws pair)* ws "}"
pair ::= "\"" [a-z]+ "\"" ws ":" ws ([0-9]+ | "\"" [a-z ]* "\"")
ws ::= [ ]?
)G");
    const auto v = test::vocabulary_of(
        {"{",   "}", "\"", ":",  ",",  " ",   "a",   "b",    "ab", "\":", "\": ", "\":\"", "\",",
         "\"}", "1", "12", "1,", "2}", " \"", "{\"", ", \"", "x",  "xy",  "y\"",  "z"});
    const auto compiled = test::compile_grammar(g, v, false);
    for (int round = 0; round < 6; ++round) {
        GrammarMatcher m(compiled);
        std::vector<std::string> outputs = {""};  // outputs[k]: after k tokens (and bytes since)
        for (int op = 0; op < 60; ++op) {
            const int kind = int(random.integer(0, 9));
            if (kind <= 5) {  // a token the definition allows (no end)
                TokenBitmask allowed = test::oracle_mask(g, *v, outputs.back());
                for (const TokenId e : v->end_tokens) allowed.reset(e);
                const TokenId t = test::draw_allowed(allowed, *v, false, random.engine());
                if (t < 0) continue;
                ASSERT_TRUE(m.accept_token(t)) << test::shown_token(*v, t);
                outputs.push_back(outputs.back() + v->token_bytes[size_t(t)]);
            } else if (kind <= 7) {  // one raw byte
                test::PrefixContinuations c(g, outputs.back());
                std::string byte;
                for (int b = 0x20; b < 0x7F && byte.empty(); b += 1 + int(random.integer(0, 3))) {
                    if (c.accepts_prefix(std::string(1, char(b)))) byte = std::string(1, char(b));
                }
                if (byte.empty()) continue;
                ASSERT_TRUE(m.accept_bytes(byte));
                outputs.back() += byte;
            } else if (kind == 8) {  // rollback
                const int32_t n = int32_t(random.integer(0, m.num_tokens()));
                m.rollback(n);
                outputs.resize(outputs.size() - size_t(n));
            } else {  // a fork walks away and back; the original must not move
                GrammarMatcher fork = m.fork();
                TokenBitmask allowed = test::oracle_mask(g, *v, outputs.back());
                for (const TokenId e : v->end_tokens) allowed.reset(e);
                const TokenId t = test::draw_allowed(allowed, *v, false, random.engine());
                if (t >= 0) fork.accept_token(t);
                fork.rollback(fork.num_tokens());
            }
            ASSERT_EQ(m.num_tokens(), int32_t(outputs.size()) - 1) << "after operation " << op;
            ASSERT_TRUE(state_difference(m, outputs.back()).empty())
                << state_difference(m, outputs.back()) << "; "
                << "after operation " << op << " (kind " << kind << "); " << random.trace();
        }
    }
}

TEST(HiddenLab12Matcher, TwoEndTokensAndRefusalsAfterTheEnd) {
    auto v = std::make_shared<TokenVocabulary>();
    v->token_bytes = {"a", "b", "", "", "ab"};  // 2 and 3 end the output
    v->end_tokens = {2, 3};
    GrammarMatcher m(test::compile_grammar(parse_gbnf(R"(root ::= "a" "b"?)"), v, false));
    EXPECT_FALSE(m.accept_token(2));
    EXPECT_FALSE(m.accept_token(3));
    ASSERT_TRUE(m.accept_token(0));
    ASSERT_TRUE(m.accept_token(3)) << "either end token ends the output";
    EXPECT_FALSE(m.accept_token(2)) << "a second end token";
    EXPECT_FALSE(m.accept_token(1)) << "a token after the end";
    EXPECT_FALSE(m.accept_bytes("b")) << "bytes after the end";
    m.rollback(1);
    ASSERT_TRUE(m.accept_token(1));
    EXPECT_FALSE(m.accept_token(1)) << "\"abb\" is not in the language";
    ASSERT_TRUE(m.accept_token(2));
    EXPECT_EQ(m.num_tokens(), 3);
    m.rollback(3);
    ASSERT_TRUE(m.accept_token(4)) << "after rolling back everything, \"ab\" from the start";
    EXPECT_TRUE(m.can_terminate());
}

// ---------------------------------------------------------------- schemas

// Grammar against validator on each text.
void expect_same_verdicts(const json& schema, const std::vector<std::string>& texts) {
    const Grammar g = json_schema_grammar(schema);
    for (const std::string& text : texts) {
        const std::string violation = test::text_violation(schema, text);
        EXPECT_EQ(test::grammar_accepts(g, text), violation.empty())
            << test::shown_bytes(text) << ": the validator says "
            << (violation.empty() ? "valid" : violation) << "; schema " << schema.dump();
    }
}

TEST(HiddenLab12Schema, ObjectsOfArraysOfObjects) {
    const json schema = json::parse(R"({"type": "object", "additionalProperties": false,
        "properties": {"rows": {"type": "array", "minItems": 1, "maxItems": 2,
                                "items": {"type": "object", "additionalProperties": false,
                                          "properties": {"id": {"type": "integer"},
                                                         "tags": {"type": "array", "maxItems": 1,
                                                                  "items": {"type": "string"}}},
                                          "required": ["id"]}},
                       "note": {"type": "string"}},
        "required": ["rows"]})");
    expect_same_verdicts(
        schema,
        {"{\"rows\":[{\"id\":1}]}", "{\"rows\":[{\"id\":1},{\"id\":2,\"tags\":[]}]}",
         "{\"rows\":[]}", "{\"rows\":[{\"id\":1},{\"id\":2},{\"id\":3}]}",
         "{\"rows\":[{\"tags\":[\"a\"]}]}", "{\"rows\":[{\"id\":1,\"tags\":[\"a\",\"b\"]}]}",
         "{\"rows\":[{\"id\":1}],\"note\":\"n\"}", "{\"note\":\"n\"}",
         "{\"rows\":[{\"id\":1,\"x\":1}]}", "{\"rows\":[{\"id\":1}],\"x\":1}",
         "{\"rows\":[{\"id\":1,\"tags\":[\"a\"]}],\"note\":\"\"}"});
}

TEST(HiddenLab12Schema, SevenPropertiesEverySubset) {
    test::RandomSource random;
    const char* names[] = {"a", "b", "c", "d", "e", "f", "g"};
    json schema = {{"type", "object"}, {"properties", json::object()}};
    json required = json::array();
    for (int i = 0; i < 7; ++i) {
        schema["properties"][names[i]] = {{"type", i % 2 ? "string" : "integer"}};
        if (random.integer(0, 2) == 0) required.push_back(names[i]);
    }
    schema["required"] = required;
    schema["additionalProperties"] = random.integer(0, 1) == 0;
    std::vector<std::string> texts;
    for (unsigned subset = 0; subset < 128; ++subset) {
        std::string text = "{";
        for (int i = 0; i < 7; ++i) {
            if (!(subset >> i & 1)) continue;
            text += std::string(text.size() > 1 ? "," : "") + "\"" + names[i] +
                    "\":" + (i % 2 ? "\"s\"" : "1");
        }
        texts.push_back(text + "}");
        texts.push_back(text + (text.size() > 1 ? "," : "") + "\"zz\":1}");
    }
    expect_same_verdicts(schema, texts);
}

// Refused keywords deep in objects and arrays name their whole path.
TEST(HiddenLab12Schema, RefusalsNameTheirPathThroughObjectsAndArrays) {
    const auto refused_at = [](const json& schema) -> std::string {
        try {
            json_schema_grammar(schema);
        } catch (const SchemaError& e) {
            return e.keyword();
        }
        return "no error";
    };
    const json deep = json::parse(R"({"type": "array", "prefixItems": [{"type": "object",
        "properties": {"x": {"type": "object", "additionalProperties": {"uniqueItems": true}}}}]})");
    EXPECT_EQ(refused_at(deep), "prefixItems.0.properties.x.additionalProperties.uniqueItems");
    const json extra =
        json::parse(R"({"additionalProperties": {"type": "array", "items": {"not": {}}}})");
    EXPECT_EQ(refused_at(extra), "additionalProperties.items.not");
}

TEST(HiddenLab12Schema, MinItemsPastAPrefixThatEndsEarly) {
    for (int64_t min = 0; min <= 4; ++min) {
        for (int64_t max = -1; max <= 5; ++max) {
            for (int cut = -1; cut <= 2; ++cut) {  // the prefix item that validates nothing
                json schema = {{"type", "array"},
                               {"prefixItems", json::array()},
                               {"items", {{"type", "null"}}}};
                for (int k = 0; k < 3; ++k) {
                    schema["prefixItems"].push_back(k == cut ? json(false)
                                                             : json{{"type", "integer"}});
                }
                schema["minItems"] = min;
                if (max >= 0) schema["maxItems"] = max;
                Grammar g;
                bool refused = false;
                try {
                    g = json_schema_grammar(schema);
                } catch (const SchemaError&) {
                    refused = true;
                }
                for (int n = 0; n <= 6; ++n) {
                    std::string text = "[";
                    for (int k = 0; k < n; ++k)
                        text += (k ? "," : "") + std::string(k < 3 ? "1" : "null");
                    text += "]";
                    const bool valid = test::text_violation(schema, text).empty();
                    const bool grammar_says = !refused && test::grammar_accepts(g, text);
                    ASSERT_EQ(grammar_says, valid) << text << "; schema " << schema.dump();
                }
            }
        }
    }
}

}  // namespace
}  // namespace servelab
