// radix_cache.h — SGLang's RadixAttention cache: a radix tree of token sequences whose nodes own KV
// blocks.
//
// Lab 11 (chapter 11.7, RadixAttention; Zheng et al., "SGLang: Efficient
// Execution of Structured Language Model Programs", 2024). Every prompt the
// engine has computed is a path from the root; a node holds a run of
// consecutive blocks (their token ids and block ids) that the sequences
// through it share, and it branches where their tokens part. A new request
// walks down from the root as far as its prompt agrees: that walk is its
// longest cached prefix, found in O(prompt length), with no hash per block.
//
// Granularity: whole blocks. Nodes split only at block boundaries, because a
// sequence's block table (Lab 4) maps whole blocks: two sequences that agree
// on 20 tokens of a 16-token block share the first block only, and each
// computes its own second. (SGLang with page size 1 splits at any token; with
// larger pages it rounds down the same way.) So the radix cache shares
// exactly what the hash cache shares; what changes is how it finds, keeps
// and evicts it.
//
// Locks: a running sequence holds one node — the deepest one covering its
// cached blocks — and a lock counts once on that node and on every ancestor
// (lock_ref: how many holders are at or below the node). A node with
// lock_ref > 0 is on some running sequence's path and is never evicted.
//
// Eviction: leaf first, least recently used first. Only unlocked leaves are
// candidates, kept in a set ordered by last use, so the choice is O(log n);
// evict_one frees the chosen leaf's LAST block, and once a leaf has no
// blocks it leaves the tree and its parent may become a candidate. The root
// side of a path goes last: a prefix many requests share stays resident as
// long as anything below it does.
//
// Invariants (check_invariants() tests all of them, the property test calls
// it after every operation):
//   1. the root holds no blocks; every other node holds >= 1 block, and
//      tokens.size() == blocks.size() * block_size;
//   2. a node's children are live nodes whose parent is that node, and they
//      differ in their first block (they are keyed by it); every slot of
//      nodes_ outside the tree is free: alive == false, in free_ids_ once;
//   3. each block is in at most one node, and the tree holds exactly one
//      allocator reference on each block in it;
//   4. lock_ref(n) == holders(n) + sum of lock_ref over n's children, where
//      holders(n) >= 0 is how many handles of n are out;
//   5. the eviction set is exactly the non-root leaves with lock_ref == 0,
//      each under its last_used; num_evictable() is the number of blocks in
//      non-root nodes with lock_ref == 0;
//   6. last_used(parent) >= last_used(child): a path is touched as a whole.
// A sequence holding blocks of the tree holds a node at or below them, so
// "nothing in use is evicted" follows from 4 and 5.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "reference/kv/block_allocator.h"
#include "reference/kv/prefix_index.h"

namespace servelab {

class RadixCache : public PrefixIndex {
  public:
    // Blocks are retained and released through `allocator`, which must
    // outlive the cache; every block holds `block_size` tokens.
    RadixCache(BlockAllocator& allocator, int64_t block_size);

    PrefixMatch match(std::span<const TokenId> tokens, int64_t max_blocks) override;
    int64_t cached_prefix_blocks(std::span<const TokenId> tokens) const override;
    PrefixNode insert(std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                      PrefixNode held) override;
    void lock(PrefixNode node) override;
    void release(PrefixNode node, std::span<const BlockId> blocks) override;
    bool evict_one() override;
    int64_t num_evictable() const override { return num_evictable_blocks_; }
    int64_t num_cached_blocks() const override { return int64_t(cached_blocks_.size()); }
    bool contains(BlockId block) const override { return cached_blocks_.count(block) != 0; }

    // For tests, the property test and the notebook's drawing.
    struct NodeView {
        PrefixNode id = 0;
        PrefixNode parent = kNoPrefixNode;
        std::vector<BlockId> blocks;
        std::vector<TokenId> tokens;
        int32_t lock_ref = 0;
        uint64_t last_used = 0;
    };
    // Every node, root first, each parent before its children.
    std::vector<NodeView> nodes() const;
    static constexpr PrefixNode kRoot = 0;
    // Throws servelab::Error naming the first invariant (above) that does not
    // hold: its number, what broke, and why the invariant matters.
    void check_invariants() const;

  private:
    struct Node {
        PrefixNode parent = kNoPrefixNode;
        std::vector<TokenId> tokens;  // blocks.size() * block_size of them
        std::vector<BlockId> blocks;
        // Keyed by the child's first block of tokens (invariant 2).
        std::map<std::vector<TokenId>, PrefixNode> children;
        int32_t lock_ref = 0;
        uint64_t last_used = 0;
        bool alive = false;  // false: a free slot in nodes_
    };

    // The block `index` of `tokens` (its block_size ids).
    std::span<const TokenId> block_of(std::span<const TokenId> tokens, int64_t index) const;
    // The child of `node` whose first block equals block `index` of `tokens`, or kNoPrefixNode.
    PrefixNode child_starting_with(PrefixNode node, std::span<const TokenId> tokens,
                                   int64_t index) const;
    // How many leading blocks of `node` equal tokens' blocks from `first_block`
    // on (at most `limit`).
    int64_t common_blocks(PrefixNode node, std::span<const TokenId> tokens, int64_t first_block,
                          int64_t limit) const;
    // Cuts `node` after its first `num_blocks` blocks: a new node takes those
    // (and node's place under its parent) and `node` keeps the rest as its
    // only child. Returns the new node. Handles of `node` stay valid: they
    // hold its whole path, which is still above and at it.
    PrefixNode split(PrefixNode node, int64_t num_blocks);
    // A fresh node under `parent` (not yet in its children), in a reused slot
    // or a new one. INVALIDATES every Node& and Node* into nodes_: a new slot
    // grows the vector, which may move all its nodes. Take references after
    // the call (split: new_node first, then `Node& head = nodes_[...]`), or
    // keep ids across it.
    PrefixNode new_node(PrefixNode parent);
    // A new unlocked leaf under `parent` holding `blocks` and their tokens (the
    // first blocks.size() · block_size of `tokens`), each retained for the tree.
    // Calls new_node: Node& references taken before it dangle after it.
    PrefixNode add_leaf(PrefixNode parent, std::span<const TokenId> tokens,
                        std::span<const BlockId> blocks);
    void unlock(PrefixNode node);
    // last_used = now for `node` and all its ancestors.
    void touch_path(PrefixNode node);
    bool is_leaf(PrefixNode node) const;
    // Keeps the eviction set true to invariant 5 for `node` after a change
    // to its lock_ref, children or last_used.
    void update_eviction_entry(PrefixNode node);
    // check_invariants' parts (radix_cache_check.cpp): invariants 1-4 and 6
    // for one node (`owner` collects block -> node for 3), the free slots
    // (2, given the nodes in the tree), and invariant 5.
    void check_node_invariants(PrefixNode node,
                               std::unordered_map<BlockId, PrefixNode>& owner) const;
    void check_free_slots(const std::vector<NodeView>& tree) const;
    void check_eviction_set() const;

    BlockAllocator& allocator_;
    int64_t block_size_;
    std::vector<Node> nodes_;           // nodes_[kRoot] is the root
    std::vector<PrefixNode> free_ids_;  // slots of removed nodes, reused
    // (last_used, node) of every unlocked non-root leaf: eviction takes begin().
    std::set<std::pair<uint64_t, PrefixNode>> eviction_order_;
    std::unordered_set<BlockId> cached_blocks_;
    int64_t num_evictable_blocks_ = 0;
    uint64_t clock_ = 0;
};

}  // namespace servelab
