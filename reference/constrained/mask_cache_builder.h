// mask_cache_builder.h — building a compiled grammar's per-position token
// masks (compiled_grammar.h says why they work).
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise, but
// built on the exercise's walk (mask_walk.h). The entry of position e:
//   1. Walk the trie from the one stack context_stack(e) (rule_contexts.h):
//      e, the frames the grammar fixes under it, and a marker for the
//      unknown rest. A token is accepted when a path takes all its bytes
//      without leaving the known context (ending exactly as it is left is
//      fine: what lies below is then not asked for anything).
//   2. Where the context is left with bytes still to come (the "exit"
//      nodes: a stack is down to its marker there), walk the subtree again
//      from continuations(R): every way the stacks below may go on, over
//      all the places R is used. The tokens in the subtree that some of
//      these take (and that step 1 did not accept) are dependent, with the
//      exit's depth; the others there are rejected: no context takes them.
//   3. When many tokens are still dependent and R has few call sites, one
//      entry per call site c: steps 1 and 2 again with the context
//      context_stack(c) + the old one, walking only towards the tokens the
//      old entry left dependent.
// Compiling stops with GrammarError once it has taken longer than the
// options' time limit (checked between positions and every few thousand
// trie nodes).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/mask_walk.h"
#include "reference/constrained/rule_contexts.h"

namespace servelab {

struct CompileDeadline {
    std::chrono::steady_clock::time_point start;
    std::chrono::milliseconds limit{0};
    // Throws GrammarError ("... took over N ms") once past the limit.
    void check() const;
};

class MaskCacheBuilder {
  public:
    // The references must outlive the builder.
    MaskCacheBuilder(const Grammar& grammar, const TokenTrie& trie,
                     const TokenVocabulary& vocabulary, CompileDeadline deadline);

    // The cache entry of the kBytes element `element` (with no tokens at
    // all when the root never reaches its rule: no stack ever has it on top).
    PositionMasks build(int32_t element);

  private:
    // Trie nodes to walk towards (sorted); null: all.
    using NodeFilter = std::vector<int32_t>;

    PositionMasks build_for_context(const std::vector<int32_t>& context, const NodeFilter* only);
    std::vector<int32_t> walk_known_context(const std::vector<int32_t>& context,
                                            TokenBitmask& accepted, const NodeFilter* only);
    void walk_past_exit(int32_t exit, const StackSet& continuations, PositionMasks& masks,
                        const NodeFilter* only);
    void refine(PositionMasks& base, const std::vector<int32_t>& context);
    bool worth_walking_below(int32_t node, const NodeFilter* only);

    const TokenTrie& trie_;
    const TokenVocabulary& vocabulary_;
    CompileDeadline deadline_;
    RuleContexts contexts_;
    MaskScratch scratch_;
    std::vector<int32_t> node_of_token_;  // -1 for tokens without bytes
    int64_t nodes_visited_ = 0;
};

}  // namespace servelab
