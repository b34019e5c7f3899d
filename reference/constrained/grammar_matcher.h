// grammar_matcher.h — where a request's output stands in its grammar, and
// which tokens may come next.
//
// Lab 12 (chapter 11.6, constrained decoding). A byte-level pushdown
// matcher: its state is a set of stacks (several when the grammar is
// ambiguous so far), each a list of grammar positions — the top is the
// next element to match, the ones below are where to return when a rule
// ends. Accepting a byte advances every stack whose top byte set holds it
// and drops the others; the input is still in the language while any stack
// survives. A stack that empties means the input so far is a whole sentence.
//
// It keeps one state per accepted token, so rollback(n) (speculative
// decoding's rejected drafts) is a pop, and fork() (parallel sampling)
// copies the state. The tokens after an end token are refused.
//
// A matcher is one request's: its mask methods reuse scratch buffers, so
// use it from one thread at a time (forks are independent).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar_stacks.h"
#include "reference/constrained/mask_walk.h"
#include "reference/constrained/token_bitmask.h"

namespace servelab {

class GrammarMatcher {
  public:
    // Throws GrammarError when the grammar's start is too ambiguous
    // (grammar_stacks.h); accept_* may throw it too, changing nothing.
    explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

    // Takes `token` if the grammar allows it here: its bytes continue the
    // language, or it is an end token and the output may end here (the
    // matcher is then terminated). Returns false, changing nothing, otherwise
    // (a token without bytes that is not an end token, or any token after an
    // end token). Throws servelab::Error for an id outside the vocabulary.
    bool accept_token(TokenId token);
    // The same for raw bytes (not counted as a token for rollback).
    bool accept_bytes(std::string_view bytes);
    // Undoes the last `num_tokens` accepted tokens (bytes accepted since
    // the last of them go too). Throws servelab::Error unless 0 <=
    // num_tokens <= this->num_tokens().
    void rollback(int32_t num_tokens);
    // An independent copy (parallel sampling: each completion its own).
    GrammarMatcher fork() const { return *this; }

    // The tokens allowed next (end tokens included where the output may
    // end; none after an end token), using the compiled grammar's cache
    // (or the walk when it has none). `mask` is resized to the vocabulary
    // if it has another size. Exactly the tokens accept_token would take.
    void fill_next_token_bitmask(TokenBitmask& mask) const;
    // The same by walking the whole token trie (the plain version).
    void fill_next_token_bitmask_by_walk(TokenBitmask& mask) const;

    // The output so far is a whole sentence (an end token may come next).
    bool can_terminate() const;
    // Nothing more may come: an end token was accepted, or no byte can
    // follow (the sentence is complete and cannot be extended; an end token
    // is then still allowed, and the only thing allowed).
    bool is_terminated() const;
    int32_t num_tokens() const;

    const CompiledGrammar& compiled() const { return *grammar_; }

  private:
    struct State {
        StackSet stacks;     // grammar_stacks.h; never empty (a stack may be)
        bool ended = false;  // an end token was accepted
    };
    const State& now() const { return states_.back(); }
    bool accept_end_token();
    bool is_end_token(TokenId token) const;
    void add_end_tokens(TokenBitmask& mask) const;
    void fit_mask(TokenBitmask& mask) const;

    std::shared_ptr<const CompiledGrammar> grammar_;
    mutable MaskScratch scratch_;  // the byte steps' and mask walks' buffers
    std::vector<State> states_;    // [0]: the start; one more per accepted token
};

}  // namespace servelab
