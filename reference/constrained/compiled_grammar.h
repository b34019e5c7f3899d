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

// The cache entry of one grammar position (a kBytes element).
struct PositionMasks {
    TokenBitmask accepted;           // context-independent: always allowed here
    std::vector<TokenId> dependent;  // decided by the stacks below; checked at run time
};

class CompiledGrammar {
  public:
    // Throws GrammarError past the time limit.
    static std::shared_ptr<const CompiledGrammar> compile(
        Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
        const GrammarCompileOptions& options = {});

    const Grammar& grammar() const { return grammar_; }
    const TokenVocabulary& vocabulary() const { return *vocabulary_; }
    const TokenTrie& trie() const { return *trie_; }
    bool has_mask_cache() const { return !position_masks_.empty(); }
    // The cache entry for the kBytes element `element` (has_mask_cache()).
    const PositionMasks& position_masks(int32_t element) const;

  private:
    CompiledGrammar() = default;
    Grammar grammar_;
    std::shared_ptr<const TokenVocabulary> vocabulary_;
    std::shared_ptr<const TokenTrie> trie_;
    std::vector<PositionMasks> position_masks_;  // by element index (empty for non-kBytes)
};

}  // namespace servelab
