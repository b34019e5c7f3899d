// matcher_accept_test.cpp — Lab 12's matcher: accept_token, accept_bytes and
// rollback keep the matcher exactly where its output stands in the grammar.
//
// Lab 12 (chapter 11.6, constrained decoding), the exercise in
// reference/constrained/matcher_accept.cpp. A matcher's state is judged
// from the outside, against the Earley oracle: after an output O, a probe
// byte string p is taken (by a fork) exactly when some sentence starts with
// O + p, and an end token exactly when O is a sentence. Tokens are drawn
// from the definition of the mask (mask_oracle.h), not from the matcher's
// own masks, so these tests do not lean on the mask walk.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_matcher.h"
#include "tests/unit/grammar_test_util.h"
#include "tests/unit/mask_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::lit;

std::shared_ptr<const CompiledGrammar> compiled_for(const Grammar& g,
                                                    std::shared_ptr<const TokenVocabulary> v) {
    GrammarCompileOptions options;
    options.mask_cache = false;  // masks are not used here
    return CompiledGrammar::compile(g, std::move(v), options);
}

// The bytes a state is probed with: printable ASCII, a newline, and bytes
// of two-byte UTF-8 characters.
const std::vector<std::string>& probes() {
    static const std::vector<std::string> all = [] {
        std::vector<std::string> p;
        for (int c = 0x20; c < 0x7F; ++c) p.push_back(std::string(1, char(c)));
        for (const char* extra : {"\n", "\xC3", "\xC3\xA9", "\"a", "1,", "\":", "}", "]"}) {
            p.push_back(extra);
        }
        return p;
    }();
    return all;
}

// "" when `m` stands where the output `output` leaves the grammar: the bytes
// and the end it takes are the oracle's; else the first difference.
std::string state_difference(const GrammarMatcher& m, const std::string& output) {
    const Grammar& g = m.compiled().grammar();
    test::PrefixContinuations continuations(g, output);
    if (m.can_terminate() != continuations.accepts("")) {
        return std::string("can_terminate() is ") + (m.can_terminate() ? "true" : "false") +
               " after " + test::shown_bytes(output);
    }
    for (const std::string& p : probes()) {
        GrammarMatcher fork = m.fork();
        const bool takes = fork.accept_bytes(p);
        if (takes != continuations.accepts_prefix(p)) {
            return "the matcher " + std::string(takes ? "takes " : "refuses ") +
                   test::shown_bytes(p) + " after " + test::shown_bytes(output) +
                   (takes ? ", which cannot follow it" : ", which can follow it");
        }
    }
    return "";
}

// One random walk's outputs: outputs[k] after k tokens, tokens[k] the k-th.
struct Walk {
    std::vector<TokenId> tokens;
    std::vector<std::string> outputs = {""};
};

// Takes up to `steps` tokens the definition allows (no end token).
Walk walk_forward(GrammarMatcher& m, int steps, std::mt19937_64& rng, std::string output = "") {
    Walk walk;
    walk.outputs = {output};
    const TokenVocabulary& v = m.compiled().vocabulary();
    for (int step = 0; step < steps; ++step) {
        TokenBitmask allowed = test::oracle_mask(m.compiled().grammar(), v, output);
        for (const TokenId end : v.end_tokens) allowed.reset(end);
        const TokenId t = test::draw_allowed(allowed, v, false, rng);
        if (t < 0) break;
        if (!m.accept_token(t)) {
            ADD_FAILURE() << "accept_token refused " << test::shown_token(v, t) << " after "
                          << test::shown_bytes(output) << ", whose bytes continue the language";
            break;
        }
        output += v.token_bytes[size_t(t)];
        walk.tokens.push_back(t);
        walk.outputs.push_back(output);
    }
    return walk;
}

std::shared_ptr<const CompiledGrammar> json_like(test::RandomSource& random) {
    return compiled_for(
        test::json_like_grammar(),
        std::make_shared<TokenVocabulary>(test::synthetic_vocabulary(400, random.seed())));
}

// ---------------------------------------------------------------- accept

TEST(MatcherAccept, TakesATokenExactlyWhenAllItsBytesContinue) {
    test::RandomSource random;
    const auto compiled = json_like(random);
    const TokenVocabulary& v = compiled->vocabulary();
    for (int round = 0; round < 3; ++round) {
        GrammarMatcher m(compiled);
        std::string output;
        for (int step = 0; step < 12; ++step) {
            const TokenBitmask want = test::oracle_mask(compiled->grammar(), v, output);
            for (TokenId t = 0; t < v.size(); ++t) {
                GrammarMatcher fork = m.fork();
                const bool took = fork.accept_token(t);
                ASSERT_EQ(took, want.test(t))
                    << "accept_token: "
                    << test::token_mistake(compiled->grammar(), v, output, t, took) << "; "
                    << random.trace();
                ASSERT_EQ(fork.num_tokens(), m.num_tokens() + (took ? 1 : 0))
                    << "accept_token(" << t << ") " << (took ? "took" : "refused")
                    << " the token: num_tokens() must grow by one exactly when a token is taken";
            }
            const Walk next = walk_forward(m, 1, random.engine(), output);
            if (next.tokens.empty()) break;
            output = next.outputs.back();
            ASSERT_TRUE(state_difference(m, output).empty())
                << state_difference(m, output) << "; "
                << "after accept_token the matcher must stand after all of the token's bytes";
        }
    }
}

TEST(MatcherAccept, ARefusedTokenChangesNothing) {
    test::RandomSource random;
    const auto compiled = json_like(random);
    const TokenVocabulary& v = compiled->vocabulary();
    GrammarMatcher m(compiled);
    const Walk walk = walk_forward(m, 10, random.engine());
    const std::string output = walk.outputs.back();
    const TokenBitmask want = test::oracle_mask(compiled->grammar(), v, output);
    int refused = 0;
    for (TokenId t = 0; t < v.size() && refused < 40; ++t) {
        if (want.test(t)) continue;
        ++refused;
        ASSERT_FALSE(m.accept_token(t))
            << test::token_mistake(compiled->grammar(), v, output, t, true);
        ASSERT_EQ(m.num_tokens(), int32_t(walk.tokens.size()));
        ASSERT_TRUE(state_difference(m, output).empty())
            << state_difference(m, output) << "; "
            << "after refusing " << test::shown_token(v, t)
            << ", the matcher changed: a refused token must change nothing (build the new "
               "state beside the current one; push it only when the bytes were all taken)";
    }
}

// root ::= "a" | "ab" ; tokens "a", "b", "ab", "c".
TEST(MatcherAccept, EndTokensOnlyWhereTheOutputMayEnd) {
    const auto v = test::vocabulary_of({"a", "b", "ab", "c"});
    const TokenId control = 4, end = 5;
    GrammarMatcher m(compiled_for(test::one_rule_grammar({lit("a"), lit("ab")}), v));
    EXPECT_FALSE(m.accept_token(end)) << "an end token before the output is a sentence";
    EXPECT_FALSE(m.accept_token(control)) << "a token without bytes (a control token)";
    EXPECT_EQ(m.num_tokens(), 0);
    ASSERT_TRUE(m.accept_token(0));
    EXPECT_FALSE(m.accept_token(control)) << "a token without bytes (a control token)";
    ASSERT_TRUE(m.accept_token(end)) << "\"a\" is a sentence: the end token may come";
    EXPECT_EQ(m.num_tokens(), 2) << "the end token counts as a token (rollback(1) undoes it)";
    EXPECT_TRUE(m.is_terminated()) << "after an end token nothing more may come";
    EXPECT_FALSE(m.can_terminate()) << "after an end token, not even another end";
    for (TokenId t = 0; t < v->size(); ++t) {
        EXPECT_FALSE(m.accept_token(t)) << "token " << t << " was taken after the end token";
    }
    EXPECT_FALSE(m.accept_bytes("b")) << "bytes were taken after the end token";
    m.rollback(1);
    EXPECT_FALSE(m.is_terminated()) << "rollback(1) undoes the end token";
    EXPECT_EQ(m.num_tokens(), 1);
    ASSERT_TRUE(m.accept_token(1)) << "after rollback(1), \"b\" may follow \"a\" again";
    EXPECT_TRUE(m.can_terminate());
    EXPECT_TRUE(m.is_terminated()) << "no byte can follow \"ab\"";
    EXPECT_TRUE(m.accept_token(end));
}

TEST(MatcherAccept, AcceptBytesMovesTheStateButIsNotAToken) {
    test::RandomSource random;
    const auto compiled = json_like(random);
    GrammarMatcher m(compiled);
    const Walk walk = walk_forward(m, 6, random.engine());
    const int32_t tokens = m.num_tokens();
    std::string output = walk.outputs.back();
    // Bytes the definition allows, one at a time.
    for (int k = 0; k < 6; ++k) {
        test::PrefixContinuations continuations(compiled->grammar(), output);
        std::string next;
        for (const std::string& p : probes()) {
            if (p.size() == 1 && continuations.accepts_prefix(p)) next = p;
        }
        if (next.empty()) break;
        ASSERT_FALSE(m.accept_bytes("\x01")) << "accept_bytes took a byte that cannot follow";
        ASSERT_TRUE(m.accept_bytes(next))
            << test::shown_bytes(next) << " after " << test::shown_bytes(output);
        output += next;
        ASSERT_EQ(m.num_tokens(), tokens) << "accept_bytes is not a token: num_tokens() must "
                                             "not change (replace the current state's stacks)";
        ASSERT_TRUE(state_difference(m, output).empty()) << state_difference(m, output) << "; "
                                                         << "after accept_bytes";
    }
    if (tokens > 0) {
        m.rollback(1);
        EXPECT_TRUE(state_difference(m, walk.outputs[walk.outputs.size() - 2]).empty())
            << state_difference(m, walk.outputs[walk.outputs.size() - 2]) << "; "
            << "rollback(1) after a token and then bytes must undo both: the bytes belong to the "
               "state after that token";
    }
}

// ---------------------------------------------------------------- rollback

TEST(MatcherRollback, ReturnsToEachEarlierStateExactly) {
    test::RandomSource random;
    const auto compiled = json_like(random);
    for (int round = 0; round < 4; ++round) {
        GrammarMatcher m(compiled);
        Walk walk = walk_forward(m, 12, random.engine());
        // Back and forth: roll back a few, walk on, several times.
        for (int turn = 0; turn < 5; ++turn) {
            const int32_t n = int32_t(random.integer(0, m.num_tokens()));
            const int32_t before = m.num_tokens();
            m.rollback(n);
            const int32_t k = before - n;
            ASSERT_EQ(m.num_tokens(), k) << "rollback(" << n << ") after " << before << " tokens";
            ASSERT_TRUE(state_difference(m, walk.outputs[size_t(k)]).empty())
                << state_difference(m, walk.outputs[size_t(k)]) << "; "
                << "after rollback(" << n << ") from " << before << " tokens to " << k
                << ": rollback must return to exactly the state after token " << k
                << " (the newest states go; those before must be as they were when saved); "
                << random.trace();
            walk.tokens.resize(size_t(k));
            walk.outputs.resize(size_t(k) + 1);
            const Walk more =
                walk_forward(m, int(random.integer(1, 6)), random.engine(), walk.outputs.back());
            walk.tokens.insert(walk.tokens.end(), more.tokens.begin(), more.tokens.end());
            walk.outputs.insert(walk.outputs.end(), more.outputs.begin() + 1, more.outputs.end());
            ASSERT_TRUE(state_difference(m, walk.outputs.back()).empty())
                << state_difference(m, walk.outputs.back()) << "; "
                << "walking on after rollback(" << n << ")";
        }
    }
}

TEST(MatcherRollback, RollingBackEverythingReturnsToTheStart) {
    test::RandomSource random;
    const auto compiled = json_like(random);
    GrammarMatcher m(compiled);
    const Walk walk = walk_forward(m, 8, random.engine());
    m.rollback(0);
    EXPECT_EQ(m.num_tokens(), int32_t(walk.tokens.size())) << "rollback(0) changes nothing";
    EXPECT_TRUE(state_difference(m, walk.outputs.back()).empty())
        << state_difference(m, walk.outputs.back()) << "; "
        << "rollback(0) changes nothing";
    m.rollback(m.num_tokens());
    EXPECT_EQ(m.num_tokens(), 0);
    EXPECT_TRUE(state_difference(m, "").empty()) << state_difference(m, "") << "; "
                                                 << "rollback(num_tokens()) returns to the start";
    const Walk again = walk_forward(m, 5, random.engine());
    EXPECT_TRUE(state_difference(m, again.outputs.back()).empty())
        << state_difference(m, again.outputs.back()) << "; "
        << "walking again from the start";
}

TEST(MatcherRollback, ForksAreIndependent) {
    test::RandomSource random;
    const auto compiled = json_like(random);
    GrammarMatcher m(compiled);
    const Walk shared = walk_forward(m, 5, random.engine());
    GrammarMatcher fork = m.fork();
    const Walk mine = walk_forward(m, 4, random.engine(), shared.outputs.back());
    fork.rollback(2);
    const Walk theirs = walk_forward(fork, 4, random.engine(), shared.outputs[3]);
    EXPECT_TRUE(state_difference(m, mine.outputs.back()).empty())
        << state_difference(m, mine.outputs.back()) << "; "
        << "the original after its fork moved";
    EXPECT_TRUE(state_difference(fork, theirs.outputs.back()).empty())
        << state_difference(fork, theirs.outputs.back()) << "; "
        << "the fork";
    m.rollback(m.num_tokens() - 5);
    EXPECT_TRUE(state_difference(m, shared.outputs.back()).empty())
        << state_difference(m, shared.outputs.back()) << "; "
        << "rollback to the fork point";
}

}  // namespace
}  // namespace servelab
