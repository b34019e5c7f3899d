// matcher_accept.cpp — the matcher takes a token (or raw bytes), and gives
// tokens back: GrammarMatcher's accept_token, accept_bytes and rollback.
//
// Lab 12 (chapter 11.6, constrained decoding): the exercise's matcher
// half (grammar_matcher.h has the contract; grammar_matcher.cpp the rest of
// the class). The state after each accepted token is kept (states_[0] is
// the start, states_[k] the state after k tokens), so that speculative
// decoding can take back its rejected drafts by rollback(n) — a pop, with
// nothing recomputed — and a refused token changes nothing. So a new state
// is built beside the current one and pushed only once it is known good;
// a state already in states_ is never changed by a later token, or a
// rollback would return to a state that is not the one it left.
#include <fmt/format.h>

#include "reference/constrained/grammar_matcher.h"

namespace servelab {

bool GrammarMatcher::accept_token(TokenId token) {
    const TokenVocabulary& vocabulary = grammar_->vocabulary();
    if (token < 0 || token >= vocabulary.size()) {
        throw Error(fmt::format("token id {} is outside the grammar's vocabulary ({} tokens)",
                                token, vocabulary.size()));
    }
    // BEGIN SOLUTION lab12 (GrammarMatcher::accept_token)
    // HINT: nothing after an end token (now().ended). An end token (is_end_token) is
    // HINT: accept_end_token's. A token without bytes is refused. Otherwise advance the
    // HINT: current stacks by all of its bytes (scratch_.stepper.advance_bytes) into a NEW
    // HINT: State; push it only if some stack took them all. now() must stay as it was: the
    // HINT: state before this token is what rollback(1) returns to.
    if (now().ended) return false;
    if (is_end_token(token)) return accept_end_token();
    const std::string& bytes = vocabulary.token_bytes[size_t(token)];
    State next;
    if (bytes.empty() || !scratch_.stepper.advance_bytes(now().stacks, bytes, next.stacks)) {
        return false;
    }
    states_.push_back(std::move(next));
    return true;
    // END SOLUTION
}

bool GrammarMatcher::accept_end_token() {
    // BEGIN SOLUTION lab12 (GrammarMatcher::accept_end_token)
    // HINT: only where the output may end (can_terminate()); then push a state with the same
    // HINT: stacks, marked ended (it counts as a token: rollback(1) undoes it).
    if (!can_terminate()) return false;
    states_.push_back({now().stacks, true});
    return true;
    // END SOLUTION
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    // BEGIN SOLUTION lab12 (GrammarMatcher::accept_bytes)
    // HINT: like accept_token's bytes, but not a token: on success the new stacks replace
    // HINT: the current state's (states_.back()), so num_tokens() does not change and the
    // HINT: next rollback(1) takes these bytes back with the token before them.
    if (now().ended) return false;
    StackSet next;
    if (!scratch_.stepper.advance_bytes(now().stacks, bytes, next)) return false;
    states_.back().stacks = std::move(next);
    return true;
    // END SOLUTION
}

void GrammarMatcher::rollback(int32_t num_tokens) {
    if (num_tokens < 0 || num_tokens > this->num_tokens()) {
        throw Error(fmt::format("cannot roll back {} tokens: the matcher has accepted {}",
                                num_tokens, this->num_tokens()));
    }
    // BEGIN SOLUTION lab12 (GrammarMatcher::rollback)
    // HINT: the last num_tokens states go; the one left on top is the state after the token
    // HINT: before them (states_[0], the start, always stays).
    states_.erase(states_.end() - num_tokens, states_.end());
    // END SOLUTION
}

}  // namespace servelab
