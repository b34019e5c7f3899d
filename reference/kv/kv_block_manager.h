// kv_block_manager.h — sequences' KV blocks: reserve, commit, fork, finish, prefix reuse.
//
// Lab 4 (chapter 11.4, PagedAttention; vLLM's block manager). The one place
// where a sequence's life meets the block pool:
//   start   — a new sequence; with prefix caching, its prompt's leading full
//             blocks are taken from the cache (those tokens are not computed);
//   reserve — slots for the tokens the next forward pass computes, allocating
//             blocks as the table fills and copying a shared last block
//             first (copy-on-write); cached blocks no one uses are evicted
//             when the pool runs out;
//   commit  — after the forward pass: the tokens are computed, and blocks
//             that just became full are named in the prefix cache;
//   fork    — n > 1 completions of one prompt share its blocks;
//   finish  — releases the blocks (cached ones stay cached).
// The prefix cache is either kind behind PrefixIndex (prefix_index.h): the
// hash chain of Lab 4 or the radix tree of Lab 11 (--prefix-cache).
// The model runner only reads and writes the blocks a table names
// (ModelRunner::forward with a PagedKvCache).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "reference/kv/block_table.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/kv/prefix_index.h"

namespace servelab {

// One sequence's share of the paged cache.
struct PagedSequence {
    BlockTable table;
    // Tokens whose keys and values are in the cache (positions 0..n-1); the
    // next forward pass starts here.
    int64_t num_computed_tokens = 0;
    // Of the prompt, how many tokens came from the prefix cache.
    int64_t num_cached_prompt_tokens = 0;
    // Of its full blocks, how many have been offered to the prefix cache.
    int64_t num_named_blocks = 0;
    // What it holds in the prefix cache (a radix node, locked while held).
    PrefixNode prefix_node = kNoPrefixNode;

    explicit PagedSequence(int64_t block_size) : table(block_size) {}
};

class KvBlockManager {
  public:
    // `cache` must outlive the manager.
    KvBlockManager(PagedKvCache& cache, PrefixCacheKind prefix_cache);
    // true: the hash cache (Lab 4's default); false: none.
    KvBlockManager(PagedKvCache& cache, bool enable_prefix_caching)
        : KvBlockManager(cache,
                         enable_prefix_caching ? PrefixCacheKind::kHash : PrefixCacheKind::kNone) {}

    PagedKvCache& cache() { return cache_; }
    bool prefix_caching() const { return prefix_cache_ != nullptr; }
    PrefixCacheKind prefix_cache_kind() const { return prefix_cache_kind_; }
    const PrefixIndex* prefix_cache() const { return prefix_cache_.get(); }
    PrefixIndex* prefix_cache() { return prefix_cache_.get(); }
    // How many leading tokens of `prompt` the prefix cache holds (whole
    // blocks; 0 without one). Changes nothing: the cache-aware scheduling
    // policy asks it of every waiting request.
    int64_t cached_prefix_tokens(std::span<const TokenId> prompt) const;
    // Evicts every cached block no sequence holds; returns how many.
    int64_t clear_prefix_cache();

    // A sequence for `prompt`, holding the prompt's cached full blocks, if
    // any. At least the prompt's last token is always left to compute: its
    // logits are what the first step is for.
    PagedSequence start(std::span<const TokenId> prompt);
    // Slots for `count` more tokens (evicting unused cached blocks if the
    // pool is short). Returns false, changing nothing, when even then the
    // pool cannot hold them.
    bool reserve(PagedSequence& sequence, int64_t count);
    // A forward pass has written every reserved slot. `tokens` is the
    // sequence's token ids so far (at least table.num_tokens() of them).
    void commit(PagedSequence& sequence, std::span<const TokenId> tokens);
    PagedSequence fork(const PagedSequence& sequence);
    void finish(PagedSequence& sequence);
    // Speculative decoding's rollback (Lab 6): the sequence forgets its tokens
    // from position `num_tokens` on — slots, computed tokens, block hashes —
    // and blocks that then hold none of its tokens return to the pool. A
    // block already named in the prefix cache stays cached (the cache holds
    // its own reference): its rows still match the tokens it was named for.
    // (A radix node the sequence holds stays held until finish: a lock on
    // blocks it no longer uses delays their eviction, never corrupts them.)
    // Throws servelab::Error unless 0 <= num_tokens <= table.num_tokens().
    void rollback(PagedSequence& sequence, int64_t num_tokens);

    // Blocks a sequence could get now: free ones plus evictable cached ones.
    int64_t num_available_blocks() const;

    // With a pool in device memory (KvStorage::kDevice): the copy-on-write
    // copies made since the last call, in order, for the device runner to
    // replay before its next forward pass (a host pool copies at once).
    std::vector<BlockCopy> take_block_copies();

  private:
    int64_t blocks_needed(const BlockTable& table, int64_t count) const;

    PagedKvCache& cache_;
    PrefixCacheKind prefix_cache_kind_;
    std::unique_ptr<PrefixIndex> prefix_cache_;
    std::vector<BlockCopy> pending_copies_;
};

}  // namespace servelab
