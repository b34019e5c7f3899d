// prefix_cache.h — KV blocks kept after their sequence finishes, found again by content.
//
// Lab 4 (chapter 11.4, PagedAttention: sharing across requests; the "automatic
// prefix caching" of vLLM and SGLang's RadixAttention do the same job). Many
// requests start alike: the same system prompt, the same few-shot examples,
// the conversation so far in a chat. A FULL block's keys and values depend
// only on the tokens up to its end, so a block is named by a hash chain:
//   hash(block i) = H(hash(block i-1), the block_size token ids of block i)
// and two sequences whose token prefixes agree up to the end of block i get
// the same hash for block i — the whole prefix is in the name, not just the
// block's own tokens. A later request with the same prefix takes the cached
// blocks instead of recomputing them (its prefill starts after the hits).
//
// The cache holds one reference on each block it names (block_allocator.h),
// so a cached block outlives the sequence that computed it. A cached block
// that no sequence holds (reference count 1: the cache's own) can be evicted
// when the pool runs out: least recently used first. A sequence that finishes
// stamps its blocks from last to first, so its LAST blocks count as least
// recently used and go first — evicting the tail of a chain keeps the rest
// of the chain reachable, evicting its head would strand every block after it.
//
// Partial blocks are never cached: their contents are still changing.
//
// It implements PrefixIndex (prefix_index.h), the interface the block
// manager uses; Lab 11's radix cache is the other implementation. Its
// eviction walks the blocks from the least recently used until it finds one
// no sequence holds, and num_evictable counts them all: both are scans,
// paid every step the scheduler asks — the radix cache keeps both O(log n).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "reference/kv/block_allocator.h"
#include "reference/kv/prefix_index.h"
#include "reference/model/tokenizer.h"

namespace servelab {

using BlockHash = uint64_t;

// The chain's start: the "parent hash" of a sequence's first block.
inline constexpr BlockHash kRootBlockHash = 0x5e27e1ab5eed0001ULL;

// H(parent, tokens): a 64-bit hash of the parent's hash and the block's ids.
BlockHash hash_block(BlockHash parent, std::span<const TokenId> block_tokens);

class PrefixCache : public PrefixIndex {
  public:
    // The cache retains and releases blocks through `allocator`, which must
    // outlive it; sequences' blocks hold `block_size` tokens.
    PrefixCache(BlockAllocator& allocator, int64_t block_size)
        : allocator_(allocator), block_size_(block_size) {}

    // PrefixIndex, in terms of the hash chain below. A sequence's place in
    // the cache is its hash chain, so the node handles are all kNoPrefixNode
    // and lock does nothing: a block a sequence holds has a reference count
    // above 1, and that alone keeps evict_one off it.
    PrefixMatch match(std::span<const TokenId> tokens, int64_t max_blocks) override;
    int64_t cached_prefix_blocks(std::span<const TokenId> tokens) const override;
    PrefixNode insert(std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                      PrefixNode held) override;
    void lock(PrefixNode) override {}
    void release(PrefixNode node, std::span<const BlockId> blocks) override;

    // The cached block for (parent, tokens), or nullopt. A hit is verified
    // against the stored parent hash and token ids, so a 64-bit collision
    // cannot return the wrong keys and values. Does not retain the block.
    std::optional<BlockId> lookup(BlockHash parent, std::span<const TokenId> block_tokens) const;

    // Names `block` (full, computed) as (parent, tokens) and retains it.
    // Returns false, and does nothing, when that content is already cached
    // under another block (two sequences computed the same prefix at once).
    bool insert(BlockHash parent, std::span<const TokenId> block_tokens, BlockId block);

    // Marks `blocks` as used now, in order: the LAST one listed ends up the
    // most recently used.
    void touch(std::span<const BlockId> blocks);

    // Evicts the least recently used block no sequence holds (its reference
    // goes back to the allocator, which frees it). Returns false when every
    // cached block is in use.
    bool evict_one() override;
    // Blocks that evict_one could free right now.
    int64_t num_evictable() const override;

    int64_t num_cached_blocks() const override { return int64_t(entries_.size()); }
    bool contains(BlockId block) const override { return hash_of_block_.count(block) != 0; }

  private:
    struct Entry {
        BlockHash parent = 0;
        std::vector<TokenId> tokens;
        BlockId block = 0;
        uint64_t last_used = 0;
    };

    BlockAllocator& allocator_;
    int64_t block_size_;
    std::unordered_map<BlockHash, Entry> entries_;
    std::unordered_map<BlockId, BlockHash> hash_of_block_;
    // Cached blocks by (last use, block id): eviction walks it from the oldest.
    std::map<std::pair<uint64_t, BlockId>, BlockHash> by_last_use_;
    uint64_t clock_ = 0;
};

}  // namespace servelab
