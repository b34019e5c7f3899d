// radix_cache.cpp — see radix_cache.h. Lab 11's exercise: match, split, insert, lock (and
// evict_one, in radix_eviction.cpp).
#include "reference/kv/radix_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/error.h"

namespace servelab {

RadixCache::RadixCache(BlockAllocator& allocator, int64_t block_size)
    : allocator_(allocator), block_size_(block_size) {
    if (block_size < 1) throw Error(fmt::format("radix cache: block size {}", block_size));
    nodes_.emplace_back();
    nodes_[kRoot].alive = true;
}

std::span<const TokenId> RadixCache::block_of(std::span<const TokenId> tokens,
                                              int64_t index) const {
    return tokens.subspan(size_t(index * block_size_), size_t(block_size_));
}

PrefixNode RadixCache::child_starting_with(PrefixNode node, std::span<const TokenId> tokens,
                                           int64_t index) const {
    const auto block = block_of(tokens, index);
    const auto& children = nodes_[size_t(node)].children;
    const auto found = children.find(std::vector<TokenId>(block.begin(), block.end()));
    return found == children.end() ? kNoPrefixNode : found->second;
}

int64_t RadixCache::common_blocks(PrefixNode node, std::span<const TokenId> tokens,
                                  int64_t first_block, int64_t limit) const {
    const Node& n = nodes_[size_t(node)];
    const int64_t most = std::min<int64_t>(limit, int64_t(n.blocks.size()));
    int64_t count = 0;
    while (count < most) {
        const auto ours = std::span<const TokenId>(n.tokens).subspan(size_t(count * block_size_),
                                                                     size_t(block_size_));
        const auto theirs = block_of(tokens, first_block + count);
        if (!std::equal(ours.begin(), ours.end(), theirs.begin(), theirs.end())) break;
        ++count;
    }
    return count;
}

PrefixNode RadixCache::new_node(PrefixNode parent) {
    PrefixNode id;
    if (!free_ids_.empty()) {
        id = free_ids_.back();
        free_ids_.pop_back();
        nodes_[size_t(id)] = Node{};
    } else {
        id = PrefixNode(nodes_.size());
        nodes_.emplace_back();
    }
    nodes_[size_t(id)].parent = parent;
    nodes_[size_t(id)].alive = true;
    return id;
}

PrefixNode RadixCache::add_leaf(PrefixNode parent, std::span<const TokenId> tokens,
                                std::span<const BlockId> blocks) {
    const PrefixNode leaf = new_node(parent);
    Node& fresh = nodes_[size_t(leaf)];
    fresh.blocks.assign(blocks.begin(), blocks.end());
    fresh.tokens.assign(tokens.begin(), tokens.begin() + int64_t(blocks.size()) * block_size_);
    for (const BlockId block : fresh.blocks) {
        allocator_.retain(block);  // the tree's own reference
        cached_blocks_.insert(block);
    }
    num_evictable_blocks_ += int64_t(fresh.blocks.size());  // unlocked until someone locks it
    nodes_[size_t(parent)]
        .children[std::vector<TokenId>(fresh.tokens.begin(), fresh.tokens.begin() + block_size_)] =
        leaf;
    update_eviction_entry(leaf);
    update_eviction_entry(parent);  // it has a child now: no longer a leaf
    return leaf;
}

PrefixNode RadixCache::split(PrefixNode node, int64_t num_blocks) {
    // BEGIN SOLUTION lab11 (split)
    // HINT: a new node (new_node(parent)) takes node's first num_blocks blocks and their
    // HINT: tokens, its lock_ref and last_used, and node's place in the parent's children
    // HINT: (same key: the same first block). node keeps the rest of its blocks and tokens,
    // HINT: and becomes the new node's only child, keyed by its new first block. Nothing is
    // HINT: retained or released: the blocks only change nodes. new_node may grow nodes_ and
    // HINT: move every node: call it first, then take your Node& references (radix_cache.h).
    const PrefixNode parent = nodes_[size_t(node)].parent;
    const PrefixNode prefix = new_node(parent);  // may reallocate nodes_: no references before
    Node& head = nodes_[size_t(prefix)];
    Node& tail = nodes_[size_t(node)];
    const auto cut_tokens = tail.tokens.begin() + num_blocks * block_size_;
    const auto cut_blocks = tail.blocks.begin() + num_blocks;
    head.tokens.assign(tail.tokens.begin(), cut_tokens);
    head.blocks.assign(tail.blocks.begin(), cut_blocks);
    head.lock_ref = tail.lock_ref;
    head.last_used = tail.last_used;
    tail.tokens.erase(tail.tokens.begin(), cut_tokens);
    tail.blocks.erase(tail.blocks.begin(), cut_blocks);
    tail.parent = prefix;
    nodes_[size_t(parent)]
        .children[std::vector<TokenId>(head.tokens.begin(), head.tokens.begin() + block_size_)] =
        prefix;
    head.children[std::vector<TokenId>(tail.tokens.begin(), tail.tokens.begin() + block_size_)] =
        node;
    return prefix;
    // END SOLUTION
}

PrefixMatch RadixCache::match(std::span<const TokenId> tokens, int64_t max_blocks) {
    max_blocks = std::min<int64_t>(max_blocks, int64_t(tokens.size()) / block_size_);
    PrefixMatch found;
    PrefixNode node = kRoot;
    // BEGIN SOLUTION lab11 (match)
    // HINT: walk down from the root: the child starting with the next block
    // HINT: (child_starting_with), how many of its blocks agree (common_blocks, at most what
    // HINT: max_blocks leaves). Agreeing on only part of the child: split it there, take the
    // HINT: new node's blocks and stop. All of it: take its blocks and go on. No child, or
    // HINT: max_blocks reached: stop.
    int64_t matched = 0;
    while (matched < max_blocks) {
        PrefixNode child = child_starting_with(node, tokens, matched);
        if (child == kNoPrefixNode) break;
        const int64_t agree = common_blocks(child, tokens, matched, max_blocks - matched);
        const bool partial = agree < int64_t(nodes_[size_t(child)].blocks.size());
        if (partial) child = split(child, agree);
        const Node& taken = nodes_[size_t(child)];
        found.blocks.insert(found.blocks.end(), taken.blocks.begin(), taken.blocks.end());
        matched += agree;
        node = child;
        if (partial) break;
    }
    // END SOLUTION
    touch_path(node);
    lock(node);
    found.node = node;
    return found;
}

int64_t RadixCache::cached_prefix_blocks(std::span<const TokenId> tokens) const {
    const int64_t max_blocks = int64_t(tokens.size()) / block_size_;
    int64_t matched = 0;
    PrefixNode node = kRoot;
    while (matched < max_blocks) {
        const PrefixNode child = child_starting_with(node, tokens, matched);
        if (child == kNoPrefixNode) break;
        const int64_t agree = common_blocks(child, tokens, matched, max_blocks - matched);
        matched += agree;
        if (agree < int64_t(nodes_[size_t(child)].blocks.size())) break;
        node = child;
    }
    return matched;
}

PrefixNode RadixCache::insert(std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                              PrefixNode held) {
    const int64_t num_blocks = int64_t(blocks.size());
    if (num_blocks * block_size_ > int64_t(tokens.size())) {
        throw Error(fmt::format("radix cache: {} blocks need {} tokens, not {}", num_blocks,
                                num_blocks * block_size_, tokens.size()));
    }
    PrefixNode node = kRoot;
    // BEGIN SOLUTION lab11 (insert)
    // HINT: walk down as match does (split where the tokens part inside a node), but do not
    // HINT: take blocks: the tree keeps its own where it has the content already. Where no
    // HINT: child starts with the next block, add_leaf hangs all the remaining blocks (and
    // HINT: their tokens) under the node reached: that leaf is the end.
    int64_t covered = 0;
    while (covered < num_blocks) {
        PrefixNode child = child_starting_with(node, tokens, covered);
        if (child == kNoPrefixNode) {
            node = add_leaf(node, tokens.subspan(size_t(covered * block_size_)),
                            blocks.subspan(size_t(covered)));
            break;
        }
        const int64_t agree = common_blocks(child, tokens, covered, num_blocks - covered);
        if (agree < int64_t(nodes_[size_t(child)].blocks.size())) child = split(child, agree);
        covered += agree;
        node = child;
    }
    // END SOLUTION
    // Lock the new place before letting go of the old one: the nodes the two
    // share never drop to lock_ref 0 on the way (and into the eviction set).
    lock(node);
    if (held != kNoPrefixNode) unlock(held);
    touch_path(node);
    return node;
}

void RadixCache::lock(PrefixNode node) {
    // BEGIN SOLUTION lab11 (lock)
    // HINT: unlock (below) in reverse: every node from `node` up to the root gains one
    // HINT: lock_ref; a (non-root) node going from 0 to 1 is no longer evictable: its blocks
    // HINT: leave num_evictable_blocks_, and it leaves the eviction set
    // HINT: (update_eviction_entry).
    for (PrefixNode n = node; n != kNoPrefixNode; n = nodes_[size_t(n)].parent) {
        Node& current = nodes_[size_t(n)];
        if (current.lock_ref++ == 0 && n != kRoot) {
            num_evictable_blocks_ -= int64_t(current.blocks.size());
            update_eviction_entry(n);
        }
    }
    // END SOLUTION
}

void RadixCache::unlock(PrefixNode node) {
    for (PrefixNode n = node; n != kNoPrefixNode; n = nodes_[size_t(n)].parent) {
        Node& current = nodes_[size_t(n)];
        if (current.lock_ref <= 0) {
            throw Error(fmt::format("radix cache: node {} unlocked more often than locked", n));
        }
        if (--current.lock_ref == 0 && n != kRoot) {
            num_evictable_blocks_ += int64_t(current.blocks.size());
            update_eviction_entry(n);
        }
    }
}

void RadixCache::release(PrefixNode node, std::span<const BlockId>) {
    if (node == kNoPrefixNode) return;
    touch_path(node);
    unlock(node);
}

void RadixCache::touch_path(PrefixNode node) {
    const uint64_t now = ++clock_;
    for (PrefixNode n = node; n != kNoPrefixNode; n = nodes_[size_t(n)].parent) {
        // Out of the set under the old time, back under the new one.
        eviction_order_.erase({nodes_[size_t(n)].last_used, n});
        nodes_[size_t(n)].last_used = now;
        update_eviction_entry(n);
    }
}

bool RadixCache::is_leaf(PrefixNode node) const {
    return nodes_[size_t(node)].children.empty();
}

}  // namespace servelab
