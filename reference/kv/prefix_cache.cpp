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
                                           std::span<const TokenId> block_tokens) {
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

}  // namespace servelab
