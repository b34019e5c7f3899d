// radix_eviction.cpp — the radix cache's eviction: least recently used unlocked leaf, a block at a
// time.
//
// Lab 11 (chapter 11.7, RadixAttention). See radix_cache.h, "Eviction". The
// candidates are exactly the unlocked non-root leaves (invariant 5), kept in
// a set ordered by last use, so each evicted block costs O(log n) — the hash
// cache (prefix_cache.cpp) instead walks its blocks from the oldest past
// every one a sequence still holds.
#include <fmt/format.h>

#include "kernels/common/error.h"
#include "reference/kv/radix_cache.h"

namespace servelab {

void RadixCache::update_eviction_entry(PrefixNode node) {
    const Node& n = nodes_[size_t(node)];
    const bool candidate = node != kRoot && n.alive && n.lock_ref == 0 && n.children.empty();
    if (candidate) {
        eviction_order_.insert({n.last_used, node});
    } else {
        eviction_order_.erase({n.last_used, node});
    }
}

bool RadixCache::evict_one() {
    // BEGIN SOLUTION lab11 (evict_one)
    // HINT: the oldest candidate is eviction_order_.begin() (none: return false). Free its
    // HINT: LAST block: release it in allocator_, drop it from cached_blocks_ and the node
    // HINT: (its tokens too); one evictable block fewer. A node left with no blocks leaves
    // HINT: the tree: out of the set, out of its parent's children, its id onto free_ids_
    // HINT: (alive = false) — and the parent, if that made it an unlocked leaf, becomes a
    // HINT: candidate (update_eviction_entry). Only leaves go: a path's root side is last.
    if (eviction_order_.empty()) return false;
    const PrefixNode victim = eviction_order_.begin()->second;
    Node& leaf = nodes_[size_t(victim)];
    const BlockId block = leaf.blocks.back();
    cached_blocks_.erase(block);
    allocator_.release(block);
    --num_evictable_blocks_;
    if (leaf.blocks.size() > 1) {
        leaf.blocks.pop_back();
        leaf.tokens.resize(leaf.blocks.size() * size_t(block_size_));
        return true;
    }
    // Its only block is gone: the node leaves the tree. Its tokens are its
    // first block, the key it has under its parent.
    const PrefixNode parent = leaf.parent;
    eviction_order_.erase({leaf.last_used, victim});
    nodes_[size_t(parent)].children.erase(leaf.tokens);
    leaf = Node{};  // alive = false
    free_ids_.push_back(victim);
    update_eviction_entry(parent);
    return true;
    // END SOLUTION
}

}  // namespace servelab
