// mask_walk.cpp — see mask_walk.h.
#include "reference/constrained/mask_walk.h"

namespace servelab {
namespace {

// levels[depth] = levels[depth - 1] after `byte`, unless it already is: made
// from the same parent by the same stacks. Returns whether it is non-empty.
bool advance_to(uint8_t byte, size_t depth, MaskScratch& scratch) {
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
}

}  // namespace

void walk_token_trie(const TokenTrie& trie, int32_t root, const StackSet& stacks,
                     MaskScratch& scratch, const TrieVisitor& visit) {
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
}

void fill_mask_by_walk(const TokenTrie& trie, const StackSet& stacks, MaskScratch& scratch,
                       TokenBitmask& mask) {
    mask.clear();
    walk_token_trie(trie, 0, stacks, scratch, [&](int32_t node, const StackSet&) {
        for (const TokenId t : trie.nodes()[size_t(node)].tokens) mask.set(t);
        return true;
    });
}

}  // namespace servelab
