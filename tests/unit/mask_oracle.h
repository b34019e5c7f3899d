// mask_oracle.h — the token mask a matcher should give, from the Earley
// oracle, and what to say when it gives another.
//
// Lab 12 test support (chapter 11.6, constrained decoding). The definition
// of a mask, computed without the matcher: after the output so far, a
// token with bytes is allowed exactly when some sentence of the grammar
// starts with output + its bytes (grammar_oracle.h's grammar_accepts_prefix,
// run once for the output and then for each token from its sets), and an
// end token exactly when the output is a whole sentence. A disagreement is
// described in the lab's terms: which token, after which output, and which
// of its bytes leaves the language, or that none does.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "reference/constrained/grammar_matcher.h"
#include "reference/constrained/token_bitmask.h"
#include "reference/constrained/token_vocabulary.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/grammar_test_util.h"

namespace servelab::test {

// Bytes as a C-like literal: printable ASCII as is, the rest as \xNN.
inline std::string shown_bytes(std::string_view bytes) {
    std::string out = "\"";
    for (const char c : bytes) {
        const uint8_t b = uint8_t(c);
        if (b >= 0x20 && b < 0x7F && c != '"' && c != '\\') {
            out += c;
        } else if (c == '"' || c == '\\') {
            out += std::string("\\") + c;
        } else {
            out += fmt::format("\\x{:02X}", b);
        }
    }
    return out + "\"";
}

inline std::string shown_token(const TokenVocabulary& v, TokenId t) {
    return fmt::format("token {} {}", t, shown_bytes(v.token_bytes[size_t(t)]));
}

inline bool is_end_token(const TokenVocabulary& v, TokenId t) {
    return std::find(v.end_tokens.begin(), v.end_tokens.end(), t) != v.end_tokens.end();
}

// The mask by definition, after `output` (which must be a prefix of a sentence).
inline TokenBitmask oracle_mask(const Grammar& g, const TokenVocabulary& v,
                                const std::string& output) {
    TokenBitmask mask(v.size());
    PrefixContinuations continuations(g, output);
    const bool whole = continuations.accepts("");
    for (TokenId t = 0; t < v.size(); ++t) {
        const std::string& bytes = v.token_bytes[size_t(t)];
        const bool allowed =
            is_end_token(v, t) ? whole : !bytes.empty() && continuations.accepts_prefix(bytes);
        if (allowed) mask.set(t);
    }
    return mask;
}

// The other way a walk gets a token wrong: stacks made for another node.
inline constexpr const char* kStaleStacks =
    "; or a node advanced from stacks that are not its parent's: levels[depth] may be reused "
    "(advance_to) only when it was made from the same parent node by the same stacks, within "
    "this walk";

// Why a token with bytes is wrongly allowed or refused after `output`.
inline std::string token_mistake(const Grammar& g, const TokenVocabulary& v,
                                 const std::string& output, TokenId t, bool allowed) {
    const std::string& bytes = v.token_bytes[size_t(t)];
    const std::string where =
        fmt::format("{} after the output {}", shown_token(v, t), shown_bytes(output));
    if (is_end_token(v, t)) {
        return allowed
                   ? where + " (an end token) is allowed, but the output is not a whole sentence"
                   : where + " (an end token) is refused, but the output is a whole sentence";
    }
    if (!allowed) {
        return where +
               " is refused, but all of its bytes continue the language: the walk must "
               "visit every node whose bytes some stack takes (skip a subtree only when "
               "no stack takes its first byte, or none can take a byte after it)" +
               kStaleStacks;
    }
    PrefixContinuations continuations(g, output);
    size_t k = 0;
    while (k < bytes.size() && continuations.accepts_prefix(bytes.substr(0, k + 1))) ++k;
    const bool after_sentence = continuations.accepts(bytes.substr(0, k));
    return fmt::format(
        "{} is allowed, but its byte {} of {} ({}) leaves the language{}: a token is allowed "
        "only when every one of its bytes is taken, so a node's tokens count only if some stack "
        "took the node's own byte, and the walk goes below a node only with the stacks that "
        "byte left{}",
        where, k, bytes.size(), shown_bytes(bytes.substr(k, 1)),
        after_sentence ? " (the bytes before it end the sentence: nothing may follow)" : "",
        kStaleStacks);
}

// "" when `got` equals `want`, the definition after `output`; else the
// first disagreement, described.
inline std::string mask_mistake(const Grammar& g, const TokenVocabulary& v,
                                const std::string& output, const TokenBitmask& got,
                                const TokenBitmask& want) {
    if (got.size() != want.size()) {
        return fmt::format("the mask has {} bits for a vocabulary of {}", got.size(), want.size());
    }
    for (TokenId t = 0; t < want.size(); ++t) {
        if (got.test(t) != want.test(t)) return token_mistake(g, v, output, t, got.test(t));
    }
    return "";
}

// The same against the definition computed here.
inline std::string mask_mistake(const Grammar& g, const TokenVocabulary& v,
                                const std::string& output, const TokenBitmask& got) {
    return mask_mistake(g, v, output, got, oracle_mask(g, v, output));
}

// A random grammar (grammar_test_util.h's) whose every rule derives some
// finite string: the matcher keeps parses into a rule that derives nothing
// (it cannot know), the oracle does not, so masks are compared on these.
inline Grammar random_productive_grammar(std::mt19937_64& rng, std::string_view alphabet) {
    for (;;) {
        Grammar g = random_grammar(rng, alphabet);
        const std::vector<int> depth = grammar_oracle_detail::min_depths(g);
        if (std::find(depth.begin(), depth.end(), -1) == depth.end()) return g;
    }
}

// A token `mask` allows, drawn uniformly; with `prefer_end`, an allowed end
// token when there is one. -1 when the mask is empty.
inline TokenId draw_allowed(const TokenBitmask& mask, const TokenVocabulary& v, bool prefer_end,
                            std::mt19937_64& rng) {
    std::vector<TokenId> allowed, ends;
    for (TokenId t = 0; t < mask.size(); ++t) {
        if (!mask.test(t)) continue;
        allowed.push_back(t);
        if (is_end_token(v, t)) ends.push_back(t);
    }
    const std::vector<TokenId>& pool = prefer_end && !ends.empty() ? ends : allowed;
    if (pool.empty()) return -1;
    return pool[size_t(rng() % pool.size())];
}

// A vocabulary of the given tokens, then one control token (no bytes) and
// one end token (its id is the last).
inline std::shared_ptr<const TokenVocabulary> vocabulary_of(std::vector<std::string> tokens) {
    auto v = std::make_shared<TokenVocabulary>();
    v->token_bytes = std::move(tokens);
    v->token_bytes.push_back("");  // a control token: never allowed
    v->token_bytes.push_back("");  // the end token
    v->end_tokens.push_back(TokenId(v->token_bytes.size() - 1));
    return v;
}

}  // namespace servelab::test
