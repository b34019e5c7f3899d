// radix_cache_check.cpp — the radix cache seen from outside: its nodes, and its invariants checked.
//
// Lab 11 (chapter 11.7, RadixAttention). check_invariants() is what the
// property test (tests/unit/radix_cache_test.cpp) runs after every random
// operation; nodes() is what `servelab radix-tree` prints for the notebook's
// drawing. Neither is used while serving.
//
// Each failure names its invariant (the numbers of radix_cache.h) and why it
// matters, so that a student reading it knows what the broken rule costs.
#include <fmt/format.h>

#include <unordered_map>

#include "kernels/common/error.h"
#include "reference/kv/radix_cache.h"

namespace servelab {
namespace {

// Why each invariant of radix_cache.h matters: what breaks when it does not hold.
constexpr const char* kWhy[] = {
    "",
    "match walks whole blocks: a node without blocks caches nothing, and tokens out of step "
    "with blocks make a match compare against the wrong KV",
    "match finds a child by the prompt's next block, and unlock and eviction walk up through "
    "parent links: a child under the wrong key, dead, or pointing at another parent is "
    "unreachable or unlocks the wrong path; and a slot is either a node of the tree or free, "
    "or new_node hands out a node still in use, or slots leak",
    "a block in two nodes is freed twice, and a block the cache holds no reference on can be "
    "handed to another sequence while a prompt still matches it",
    "lock_ref counts the running sequences at or below a node: a node with fewer locks than "
    "its children becomes evictable while a sequence below it still runs",
    "evict_one takes the set's first entry and admission counts on num_evictable(): a locked "
    "or inner node in the set is evicted under a running sequence or strands its children, "
    "and a wrong count admits requests whose blocks cannot be freed",
    "leaf-first LRU needs a path touched as a whole: a parent older than its child is "
    "evicted, once it is a leaf, before subtrees that were used less recently",
};

[[noreturn]] void fail(int invariant, const std::string& what) {
    throw Error(
        fmt::format("radix cache invariant {} broken: {} ({})", invariant, what, kWhy[invariant]));
}

}  // namespace

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

void RadixCache::check_node_invariants(PrefixNode id,
                                       std::unordered_map<BlockId, PrefixNode>& owner) const {
    const Node& n = nodes_[size_t(id)];
    const bool root = id == kRoot;
    if (root != n.blocks.empty()) {
        fail(1, fmt::format("node {} holds {} blocks (the root holds none, every other node >= 1)",
                            id, n.blocks.size()));
    }
    if (n.tokens.size() != n.blocks.size() * size_t(block_size_)) {
        fail(1, fmt::format("node {} has {} tokens for {} blocks of {}", id, n.tokens.size(),
                            n.blocks.size(), block_size_));
    }
    int32_t below = 0;
    for (const auto& [key, child] : n.children) {
        const Node& c = nodes_[size_t(child)];
        if (!c.alive || c.parent != id) {
            fail(2, fmt::format("node {} lists child {}, which is {}", id, child,
                                c.alive ? fmt::format("the child of node {}", c.parent)
                                        : std::string("no longer in the tree")));
        }
        if (c.tokens.size() < size_t(block_size_) ||
            !std::equal(key.begin(), key.end(), c.tokens.begin())) {
            fail(2, fmt::format("node {}'s child {} is not keyed by its first block", id, child));
        }
        if (c.last_used > n.last_used) {
            fail(6, fmt::format("node {} was used at {}, after its parent {} (at {})", child,
                                c.last_used, id, n.last_used));
        }
        below += c.lock_ref;
    }
    if (n.lock_ref < below) {
        fail(4, fmt::format("node {} has lock_ref {}, less than its children's {}", id, n.lock_ref,
                            below));
    }
    for (const BlockId block : n.blocks) {
        if (!owner.emplace(block, id).second) {
            fail(3, fmt::format("block {} is in nodes {} and {}", block, owner[block], id));
        }
        if (allocator_.ref_count(block) < 1 || cached_blocks_.count(block) == 0) {
            fail(3, fmt::format("block {} of node {} is not held by the cache", block, id));
        }
    }
}

void RadixCache::check_free_slots(const std::vector<NodeView>& tree) const {
    std::vector<bool> in_tree(nodes_.size(), false);
    for (const NodeView& view : tree) in_tree[size_t(view.id)] = true;
    std::vector<int> times_free(nodes_.size(), 0);
    for (const PrefixNode id : free_ids_) ++times_free[size_t(id)];
    for (size_t id = 0; id < nodes_.size(); ++id) {
        if (in_tree[id] && (times_free[id] > 0 || !nodes_[id].alive)) {
            fail(2, fmt::format("node {} is in the tree but marked free: new_node would hand it "
                                "out again",
                                id));
        }
        if (!in_tree[id] && nodes_[id].alive) {
            fail(2, fmt::format("slot {} left the tree but is still alive: a node that leaves "
                                "the tree is reset (leaf = Node{{}}, alive = false)",
                                id));
        }
        if (!in_tree[id] && times_free[id] != 1) {
            fail(2, fmt::format("slot {} left the tree but is in free_ids_ {} times: once, so "
                                "that new_node reuses it (never: the slot leaks)",
                                id, times_free[id]));
        }
    }
}

void RadixCache::check_eviction_set() const {
    for (const auto& [last_used, id] : eviction_order_) {
        const Node& n = nodes_[size_t(id)];
        if (!n.alive || id == kRoot)
            fail(5, fmt::format("node {} in the eviction set is gone", id));
        if (!n.children.empty()) {
            fail(5, fmt::format("node {} is an eviction candidate but has children: only leaves "
                                "may be evicted (an LRU that evicts the root path)",
                                id));
        }
        if (n.lock_ref > 0) {
            fail(5, fmt::format("node {} is an eviction candidate but locked (lock_ref {}): "
                                "evicting a locked node",
                                id, n.lock_ref));
        }
        if (last_used != n.last_used) {
            fail(5, fmt::format("node {} is in the eviction set under time {}, but was last used "
                                "at {}",
                                id, last_used, n.last_used));
        }
    }
    std::set<std::pair<uint64_t, PrefixNode>> candidates;
    int64_t evictable_blocks = 0;
    for (const NodeView& view : nodes()) {
        if (view.id == kRoot || view.lock_ref != 0) continue;
        evictable_blocks += int64_t(view.blocks.size());
        if (nodes_[size_t(view.id)].children.empty()) candidates.insert({view.last_used, view.id});
    }
    if (candidates != eviction_order_) {
        fail(5, fmt::format("the eviction set holds {} nodes, but {} nodes are unlocked leaves "
                            "(a leaf missing from the set is never evicted)",
                            eviction_order_.size(), candidates.size()));
    }
    if (evictable_blocks != num_evictable_blocks_) {
        fail(5, fmt::format("num_evictable() is {}, but {} blocks are in unlocked nodes",
                            num_evictable_blocks_, evictable_blocks));
    }
}

void RadixCache::check_invariants() const {
    std::unordered_map<BlockId, PrefixNode> owner;  // block -> the node it is in
    const std::vector<NodeView> tree = nodes();
    for (const NodeView& view : tree) check_node_invariants(view.id, owner);
    check_free_slots(tree);
    if (owner.size() != cached_blocks_.size()) {
        fail(3, fmt::format("{} blocks are in nodes, but {} are counted as cached", owner.size(),
                            cached_blocks_.size()));
    }
    check_eviction_set();
}

}  // namespace servelab
