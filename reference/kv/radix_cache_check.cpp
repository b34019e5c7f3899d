// radix_cache_check.cpp — the radix cache seen from outside: its nodes, and its invariants checked.
//
// Lab 11 (chapter 11.7, RadixAttention). check_invariants() is what the
// property test (tests/unit/radix_cache_test.cpp) runs after every random
// operation; nodes() is what `servelab radix-tree` prints for the notebook's
// drawing. Neither is used while serving.
#include <fmt/format.h>

#include <unordered_map>

#include "reference/common/error.h"
#include "reference/kv/radix_cache.h"

namespace servelab {

std::vector<RadixCache::NodeView> RadixCache::nodes() const {
    std::vector<NodeView> out;
    std::vector<PrefixNode> stack = {kRoot};
    while (!stack.empty()) {
        const PrefixNode id = stack.back();
        stack.pop_back();
        const Node& n = nodes_[size_t(id)];
        out.push_back({id, n.parent, n.blocks, n.tokens, n.lock_ref, n.last_used});
        for (auto it = n.children.rbegin(); it != n.children.rend(); ++it) {
            stack.push_back(it->second);
        }
    }
    return out;
}

void RadixCache::check_invariants() const {
    auto fail = [](const std::string& what) {
        throw Error("radix cache invariant broken: " + what);
    };
    std::unordered_map<BlockId, PrefixNode> owner;
    int64_t evictable_blocks = 0;
    std::set<std::pair<uint64_t, PrefixNode>> candidates;
    for (const NodeView& view : nodes()) {
        const Node& n = nodes_[size_t(view.id)];
        const bool root = view.id == kRoot;
        if (root != n.blocks.empty()) {
            fail(fmt::format("1: node {} holds {} blocks (the root holds none, others >= 1)",
                             view.id, n.blocks.size()));
        }
        if (n.tokens.size() != n.blocks.size() * size_t(block_size_)) {
            fail(fmt::format("1: node {} has {} tokens for {} blocks", view.id, n.tokens.size(),
                             n.blocks.size()));
        }
        int32_t below = 0;
        for (const auto& [key, child] : n.children) {
            const Node& c = nodes_[size_t(child)];
            if (!c.alive || c.parent != view.id)
                fail(fmt::format("node {}'s child {}", view.id, child));
            if (c.tokens.size() < size_t(block_size_) ||
                !std::equal(key.begin(), key.end(), c.tokens.begin())) {
                fail(fmt::format("2: node {}'s child {} is not keyed by its first block", view.id,
                                 child));
            }
            if (c.last_used > n.last_used) {
                fail(fmt::format("6: node {} used after its parent {}", child, view.id));
            }
            below += c.lock_ref;
        }
        if (n.lock_ref < below) {
            fail(fmt::format("4: node {} has lock_ref {} < its children's {}", view.id, n.lock_ref,
                             below));
        }
        for (const BlockId block : n.blocks) {
            if (!owner.emplace(block, view.id).second) {
                fail(
                    fmt::format("3: block {} is in nodes {} and {}", block, owner[block], view.id));
            }
            if (allocator_.ref_count(block) < 1 || cached_blocks_.count(block) == 0) {
                fail(
                    fmt::format("3: block {} of node {} is not held by the cache", block, view.id));
            }
        }
        if (!root && n.lock_ref == 0) {
            evictable_blocks += int64_t(n.blocks.size());
            if (n.children.empty()) candidates.insert({n.last_used, view.id});
        }
    }
    if (owner.size() != cached_blocks_.size()) {
        fail(fmt::format("3: {} blocks in nodes, {} counted as cached", owner.size(),
                         cached_blocks_.size()));
    }
    for (const auto& [last_used, id] : eviction_order_) {
        const Node& n = nodes_[size_t(id)];
        if (!n.alive || id == kRoot)
            fail(fmt::format("5: node {} in the eviction set is gone", id));
        if (!n.children.empty()) {
            fail(
                fmt::format("5: node {} is an eviction candidate but has children: only leaves "
                            "may be evicted (an LRU that evicts the root path)",
                            id));
        }
        if (n.lock_ref > 0) {
            fail(
                fmt::format("5: node {} is an eviction candidate but locked (lock_ref {}): "
                            "evicting a locked node",
                            id, n.lock_ref));
        }
    }
    if (candidates != eviction_order_) {
        fail(fmt::format("5: the eviction set holds {} nodes, the unlocked leaves are {}",
                         eviction_order_.size(), candidates.size()));
    }
    if (evictable_blocks != num_evictable_blocks_) {
        fail(fmt::format("5: {} blocks counted evictable, {} in unlocked nodes",
                         num_evictable_blocks_, evictable_blocks));
    }
}

}  // namespace servelab
