// compiled_grammar.h — a grammar prepared for one vocabulary: the token trie
// and the per-position mask cache.
//
// Lab 12 (chapter 11.6, constrained decoding). Computing a mask by walking
// every token through the matcher would cost the whole vocabulary's bytes per
// step. XGrammar's observation (Dong et al., 2024) makes it cheap: at a
// given grammar position (the element on top of a matcher stack), most
// tokens are decided by the innermost rule alone — accepted because their
// bytes stay inside it, or rejected because they leave it by a wrong byte.
// Only the few whose bytes run past the rule's end depend on the stack
// below. So for each position, once per grammar, the cache stores the
// context-independent accepted tokens as a bitmask and the list of
// context-dependent ones; at run time a mask is an OR of cached bitmasks
// plus a check of the few dependent tokens against the full stacks.
//
// Three refinements keep that list short (mask_cache_builder.h). The
// context of a position reaches below its own rule wherever the grammar
// fixes what lies there (rule_contexts.h): inside a JSON string, through
// the closing quote. A token that runs past the context is dependent only
// if some place the context is used could take the rest of its bytes;
// otherwise it is rejected outright (" the" after whitespace, where no
// value starts "th"). And where a small rule shared by a few call sites
// (hex digits in \u escapes) still leaves many tokens dependent, the
// position gets one entry per call site, chosen at run time by the stack
// entry under the context.
//
// Compiled grammars are immutable and shared (GrammarCache keys them by the
// constraint's text), so many requests and threads may read one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "reference/constrained/grammar.h"
#include "reference/constrained/token_bitmask.h"
#include "reference/constrained/token_trie.h"
#include "reference/constrained/token_vocabulary.h"

namespace servelab {

struct GrammarCompileOptions {
    // Build the per-position cache (false: every mask is a full trie walk,
    // the plain version the cache is checked against).
    bool mask_cache = true;
    // Compiling longer than this throws GrammarError ("the constraint is too
    // complex: compiling it took over N ms"); the server answers 400.
    std::chrono::milliseconds time_limit{5000};
};

// A token whose fate at a position is decided by the stack below it: after
// its first `exit_bytes` bytes the position's context may end, and the rest
// of its bytes must then be taken by whatever lies below.
struct DependentToken {
    TokenId token = -1;
    int32_t exit_bytes = 0;  // in [1, the token's length)
};

// The cache entry of one grammar position (a kBytes element).
struct PositionMasks {
    TokenBitmask accepted;  // context-independent: always allowed here
    // Decided by the stacks below; checked at run time, from the stack under
    // the context. Sorted by the bytes past exit_bytes, so that checks share
    // their common prefixes. A token may appear once per exit point.
    std::vector<DependentToken> dependent;
    // The entries at the top of every stack with this position on top that
    // the cache took as known (the position, and the frames under it that
    // the grammar fixes); what lies under them is what `dependent` is
    // checked against.
    int32_t context_depth = 1;
    // For some positions: entries for the stacks whose entry right under
    // the context is `entry_below`, sorted by it, each with a longer
    // context (fewer dependent tokens). A stack matching none uses this one.
    std::vector<PositionMasks> refined;
    int32_t entry_below = -1;  // in a refined entry: the stack entry it is for
};

class CompiledGrammar {
  public:
    // Throws GrammarError past the time limit (or for a grammar too
    // ambiguous for the matcher's limits, grammar_stacks.h), servelab::Error
    // for a missing vocabulary or an end token outside it.
    static std::shared_ptr<const CompiledGrammar> compile(
        Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
        const GrammarCompileOptions& options = {});

    const Grammar& grammar() const { return grammar_; }
    const TokenVocabulary& vocabulary() const { return *vocabulary_; }
    const TokenTrie& trie() const { return *trie_; }
    bool has_mask_cache() const { return !position_masks_.empty(); }
    // The cache entry for the kBytes element `element` (has_mask_cache()).
    const PositionMasks& position_masks(int32_t element) const {
        return position_masks_[size_t(element)];
    }

  private:
    CompiledGrammar() = default;
    Grammar grammar_;
    std::shared_ptr<const TokenVocabulary> vocabulary_;
    std::shared_ptr<const TokenTrie> trie_;
    std::vector<PositionMasks> position_masks_;  // by element index (empty for non-kBytes)
};

}  // namespace servelab
