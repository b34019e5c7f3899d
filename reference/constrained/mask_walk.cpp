// mask_walk.cpp — see mask_walk.h: the token mask by a walk over the token trie.
//
// Lab 12 (chapter 11.6, constrained decoding): the exercise's mask half.
// Everything that computes a mask goes through walk_token_trie: the plain
// mask (fill_mask_by_walk, below) and, once per grammar position, the mask
// cache's builder (mask_cache_builder.cpp), so a token the walk wrongly
// admits is admitted by the cached masks too.
#include "reference/constrained/mask_walk.h"

namespace servelab {
namespace {

// levels[depth] = levels[depth - 1] after `byte`, unless it already is: made
// from the same parent by the same stacks. Returns whether it is non-empty.
bool advance_to(uint8_t byte, size_t depth, MaskScratch& scratch) {
    // BEGIN SOLUTION lab12 (advance_to)
    // HINT: levels[depth] becomes levels[depth - 1] advanced by `byte`
    // HINT: (scratch.stepper.advance). The plain version always advances. The fast one first
    // HINT: asks which stacks take the byte (stepper.matching_stacks: 0 = none, so return
    // HINT: false at once) and skips the advance when levels[depth] was made from the same
    // HINT: parent node (scratch.path[depth - 1]) by the same stacks (made_from / made_by;
    // HINT: kUnknownMatch can never be trusted): siblings inside a string all advance alike.
    // HINT: Returns whether levels[depth] holds a stack.
    std::vector<StackSet>& levels = scratch.levels;
    if (levels.size() <= depth) levels.resize(depth + 1);
    if (scratch.made_from.size() <= depth) {
        scratch.made_from.resize(depth + 1, -1);
        scratch.made_by.resize(depth + 1, kUnknownMatch);
    }
    const uint64_t matching = scratch.stepper.matching_stacks(levels[depth - 1], byte);
    if (matching == 0) return false;  // no stack takes it
    const int32_t parent = scratch.path[depth - 1];
    if (matching == kUnknownMatch || scratch.made_from[depth] != parent ||
        scratch.made_by[depth] != matching) {
        scratch.stepper.advance(levels[depth - 1], byte, levels[depth]);
        scratch.made_from[depth] = parent;
        scratch.made_by[depth] = matching;
    }
    return !levels[depth].empty();
    // END SOLUTION
}

}  // namespace

void walk_token_trie(const TokenTrie& trie, int32_t root, const StackSet& stacks,
                     MaskScratch& scratch, const TrieVisitor& visit) {
    // BEGIN SOLUTION lab12 (walk_token_trie)
    // HINT: nodes are in depth-first order and a subtree is [node, node + subtree_size).
    // HINT: Walk from root + 1 to the subtree's end; a node at depth d (relative to root)
    // HINT: advances the stacks of depth d - 1 (its parent's: the node before it in this
    // HINT: order is its parent or in a finished subtree) by its byte into levels[d]
    // HINT: (advance_to; keep scratch.path[d] = node). Visit the node only if some stack
    // HINT: took its byte; go below it (node + 1) only if the visitor says so and the stacks
    // HINT: can take another byte (stepper.can_take_bytes); otherwise skip its whole subtree
    // HINT: in one addition.
    const std::vector<TokenTrie::Node>& nodes = trie.nodes();
    const int32_t root_depth = nodes[size_t(root)].depth;
    std::vector<StackSet>& levels = scratch.levels;
    if (levels.empty()) levels.resize(1);
    levels[0] = stacks;
    scratch.path.assign(1, root);  // path[d]: the node whose stacks levels[d] holds
    scratch.made_from.clear();     // made_from[d], made_by[d]: how levels[d] was made
    scratch.made_by.clear();
    const int32_t end = root + nodes[size_t(root)].subtree_size;
    for (int32_t node = root + 1; node < end;) {
        const TokenTrie::Node& here = nodes[size_t(node)];
        const size_t depth = size_t(here.depth - root_depth);
        // levels[depth - 1] holds the parent's stacks: the previous node in
        // depth-first order is the parent or a node of a finished subtree.
        const bool taken = advance_to(here.byte, depth, scratch);
        scratch.path.resize(depth);
        scratch.path.push_back(node);
        const bool below =
            taken && visit(node, levels[depth]) && scratch.stepper.can_take_bytes(levels[depth]);
        node += below ? 1 : here.subtree_size;
    }
    // END SOLUTION
}

void fill_mask_by_walk(const TokenTrie& trie, const StackSet& stacks, MaskScratch& scratch,
                       TokenBitmask& mask) {
    // BEGIN SOLUTION lab12 (fill_mask_by_walk)
    // HINT: clear the mask, walk the whole trie from its root (node 0) with `stacks`, and
    // HINT: set the tokens ending at every node the walk visits.
    mask.clear();
    walk_token_trie(trie, 0, stacks, scratch, [&](int32_t node, const StackSet&) {
        for (const TokenId t : trie.nodes()[size_t(node)].tokens) mask.set(t);
        return true;
    });
    // END SOLUTION
}

}  // namespace servelab
