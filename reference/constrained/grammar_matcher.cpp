// grammar_matcher.cpp — see grammar_matcher.h: the matcher's start, its masks
// and what it says about its state. Taking tokens and bytes, and rolling
// them back, is in matcher_accept.cpp (Lab 12's exercise).
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
