// prefix_cache.cpp — see prefix_cache.h.
#include "reference/kv/prefix_cache.h"

#include <algorithm>

namespace servelab {
namespace {

// splitmix64's finalizer: every input bit affects every output bit.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

}  // namespace

BlockHash hash_block(BlockHash parent, std::span<const TokenId> block_tokens) {
    uint64_t h = mix(parent);
    for (TokenId token : block_tokens) h = mix(h ^ uint64_t(uint32_t(token)));
    return mix(h ^ block_tokens.size());
}

std::optional<BlockId> PrefixCache::lookup(BlockHash parent,
                                           std::span<const TokenId> block_tokens) const {
    const auto found = entries_.find(hash_block(parent, block_tokens));
    if (found == entries_.end()) return std::nullopt;
    const Entry& entry = found->second;
    const bool same_content =
        entry.parent == parent && std::equal(entry.tokens.begin(), entry.tokens.end(),
                                             block_tokens.begin(), block_tokens.end());
    if (!same_content) return std::nullopt;
    return entry.block;
}

bool PrefixCache::insert(BlockHash parent, std::span<const TokenId> block_tokens, BlockId block) {
    const BlockHash hash = hash_block(parent, block_tokens);
    if (entries_.count(hash) != 0 || contains(block)) return false;
    allocator_.retain(block);
    const uint64_t now = ++clock_;
    entries_[hash] = Entry{parent, {block_tokens.begin(), block_tokens.end()}, block, now};
    hash_of_block_[block] = hash;
    by_last_use_[{now, block}] = hash;
    return true;
}

void PrefixCache::touch(std::span<const BlockId> blocks) {
    for (BlockId block : blocks) {
        const auto found = hash_of_block_.find(block);
        if (found == hash_of_block_.end()) continue;  // not cached (a partial block)
        Entry& entry = entries_.at(found->second);
        by_last_use_.erase({entry.last_used, block});
        entry.last_used = ++clock_;
        by_last_use_[{entry.last_used, block}] = found->second;
    }
}

bool PrefixCache::evict_one() {
    for (auto it = by_last_use_.begin(); it != by_last_use_.end(); ++it) {
        const BlockId block = it->first.second;
        if (allocator_.ref_count(block) != 1) continue;  // a sequence still holds it
        entries_.erase(it->second);
        hash_of_block_.erase(block);
        by_last_use_.erase(it);
        allocator_.release(block);
        return true;
    }
    return false;
}

int64_t PrefixCache::num_evictable() const {
    int64_t count = 0;
    for (const auto& [block, hash] : hash_of_block_) {
        if (allocator_.ref_count(block) == 1) ++count;
    }
    return count;
}

PrefixMatch PrefixCache::match(std::span<const TokenId> tokens, int64_t max_blocks) {
    PrefixMatch found;
    BlockHash parent = kRootBlockHash;
    for (int64_t i = 0; i < max_blocks && (i + 1) * block_size_ <= int64_t(tokens.size()); ++i) {
        const auto block_tokens = tokens.subspan(size_t(i * block_size_), size_t(block_size_));
        const std::optional<BlockId> block = lookup(parent, block_tokens);
        if (!block) break;
        found.blocks.push_back(*block);
        parent = hash_block(parent, block_tokens);
    }
    touch(found.blocks);
    return found;
}

int64_t PrefixCache::cached_prefix_blocks(std::span<const TokenId> tokens) const {
    int64_t count = 0;
    BlockHash parent = kRootBlockHash;
    for (; (count + 1) * block_size_ <= int64_t(tokens.size()); ++count) {
        const auto block_tokens = tokens.subspan(size_t(count * block_size_), size_t(block_size_));
        if (!lookup(parent, block_tokens)) break;
        parent = hash_block(parent, block_tokens);
    }
    return count;
}

PrefixNode PrefixCache::insert(std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                               PrefixNode) {
    // The chain is recomputed from the first block: a block's name depends on
    // every token before it. (Hashing is cheap next to the forward pass that
    // filled the block.) Blocks named already are skipped by insert's check.
    BlockHash parent = kRootBlockHash;
    for (size_t i = 0; i < blocks.size(); ++i) {
        const auto block_tokens = tokens.subspan(i * size_t(block_size_), size_t(block_size_));
        if (!contains(blocks[i])) insert(parent, block_tokens, blocks[i]);
        parent = hash_block(parent, block_tokens);
    }
    return kNoPrefixNode;
}

void PrefixCache::release(PrefixNode, std::span<const BlockId> blocks) {
    // Last block first, so that the first block is the most recently used.
    std::vector<BlockId> last_to_first(blocks.rbegin(), blocks.rend());
    touch(last_to_first);
}

}  // namespace servelab
