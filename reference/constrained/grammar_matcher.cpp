// grammar_matcher.cpp — see grammar_matcher.h.
#include "reference/constrained/grammar_matcher.h"

#include <fmt/format.h>

#include <algorithm>

#include "reference/constrained/cached_mask.h"
#include "reference/constrained/mask_walk.h"

namespace servelab {
namespace {

const Grammar& grammar_of(const std::shared_ptr<const CompiledGrammar>& compiled) {
    if (!compiled) throw Error("GrammarMatcher needs a compiled grammar (got none)");
    return compiled->grammar();
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), scratch_(grammar_of(grammar_)) {
    states_.push_back({scratch_.stepper.initial_stacks(), false});
}

bool GrammarMatcher::accept_token(TokenId token) {
    const TokenVocabulary& vocabulary = grammar_->vocabulary();
    if (token < 0 || token >= vocabulary.size()) {
        throw Error(fmt::format("token id {} is outside the grammar's vocabulary ({} tokens)",
                                token, vocabulary.size()));
    }
    if (now().ended) return false;
    if (is_end_token(token)) return accept_end_token();
    const std::string& bytes = vocabulary.token_bytes[size_t(token)];
    State next;
    if (bytes.empty() || !scratch_.stepper.advance_bytes(now().stacks, bytes, next.stacks)) {
        return false;
    }
    states_.push_back(std::move(next));
    return true;
}

bool GrammarMatcher::accept_end_token() {
    if (!can_terminate()) return false;
    states_.push_back({now().stacks, true});
    return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (now().ended) return false;
    StackSet next;
    if (!scratch_.stepper.advance_bytes(now().stacks, bytes, next)) return false;
    states_.back().stacks = std::move(next);
    return true;
}

void GrammarMatcher::rollback(int32_t num_tokens) {
    if (num_tokens < 0 || num_tokens > this->num_tokens()) {
        throw Error(fmt::format("cannot roll back {} tokens: the matcher has accepted {}",
                                num_tokens, this->num_tokens()));
    }
    states_.erase(states_.end() - num_tokens, states_.end());
}

void GrammarMatcher::fill_next_token_bitmask(TokenBitmask& mask) const {
    if (!grammar_->has_mask_cache()) return fill_next_token_bitmask_by_walk(mask);
    fit_mask(mask);
    mask.clear();
    if (now().ended) return;
    fill_mask_from_cache(*grammar_, now().stacks, mask, scratch_);
    add_end_tokens(mask);
}

void GrammarMatcher::fill_next_token_bitmask_by_walk(TokenBitmask& mask) const {
    fit_mask(mask);
    mask.clear();
    if (now().ended) return;
    fill_mask_by_walk(grammar_->trie(), now().stacks, scratch_, mask);
    add_end_tokens(mask);
}

bool GrammarMatcher::can_terminate() const {
    return !now().ended && now().stacks.has_complete();
}

bool GrammarMatcher::is_terminated() const {
    return now().ended || !now().stacks.has_live();
}

int32_t GrammarMatcher::num_tokens() const {
    return int32_t(states_.size()) - 1;
}

bool GrammarMatcher::is_end_token(TokenId token) const {
    const std::vector<TokenId>& ends = grammar_->vocabulary().end_tokens;
    return std::find(ends.begin(), ends.end(), token) != ends.end();
}

void GrammarMatcher::add_end_tokens(TokenBitmask& mask) const {
    if (!can_terminate()) return;
    for (const TokenId t : grammar_->vocabulary().end_tokens) mask.set(t);
}

void GrammarMatcher::fit_mask(TokenBitmask& mask) const {
    const int32_t vocab_size = grammar_->vocabulary().size();
    if (mask.size() != vocab_size) mask = TokenBitmask(vocab_size);
}

}  // namespace servelab
