// mask_walk.h — the token mask by walking the token trie: the plain version.
//
// Lab 12 (chapter 11.6, constrained decoding). A token is allowed when the
// matcher can take all of its bytes. Walking the trie depth first, each
// node's byte advances the stack set of its parent, so a prefix shared by
// many tokens is matched once, and when no stack takes a node's byte the
// whole subtree below it is skipped (one addition: nodes are stored in
// depth-first order). The tokens at a node reached with stacks left are
// allowed. The mask cache's builder (mask_cache_builder.h) walks the same
// way, from one grammar position instead of the matcher's stacks.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "reference/constrained/grammar_stacks.h"
#include "reference/constrained/token_bitmask.h"
#include "reference/constrained/token_trie.h"

namespace servelab {

struct PositionMasks;  // compiled_grammar.h

// Scratch space for the walks, kept by its owner between calls (so a step's
// mask allocates nothing once warm); one per thread.
struct MaskScratch {
    explicit MaskScratch(const Grammar& grammar) : stepper(grammar) {}
    StackStepper stepper;
    std::vector<StackSet> levels;  // the stack set at each trie depth
    // The walk's memory of how levels[d] was made: from which parent node,
    // by which of its stacks.
    std::vector<int32_t> path, made_from;
    std::vector<uint64_t> made_by;
    std::vector<const PositionMasks*> entries, distinct_entries;  // cached_mask.cpp's
};

// Called at each node reached with a non-empty stack set (the stacks after
// the node's bytes); returns whether to walk below the node.
using TrieVisitor = std::function<bool(int32_t node, const StackSet& stacks)>;

// Walks the trie below `root` (its subtree, `root` itself left out), starting
// from `stacks` at `root`. The walk goes below a node while some stack there
// can take a byte. A node whose parent's stacks take its byte exactly as
// they took its previous sibling's ('a' and 'b' in a string) gets the
// sibling's stacks without advancing again.
void walk_token_trie(const TokenTrie& trie, int32_t root, const StackSet& stacks,
                     MaskScratch& scratch, const TrieVisitor& visit);

// mask = the tokens whose bytes some stack of `stacks` takes (mask cleared
// first; the end tokens, which have no bytes, are the caller's).
void fill_mask_by_walk(const TokenTrie& trie, const StackSet& stacks, MaskScratch& scratch,
                       TokenBitmask& mask);

}  // namespace servelab
