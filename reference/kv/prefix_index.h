// prefix_index.h — what the block manager asks of a prefix cache, whichever kind it is.
//
// Labs 4 and 11 (chapter 11.4, sharing KV across requests; 11.7, SGLang's
// RadixAttention). A prefix cache keeps the KV blocks of prompts already
// computed and hands them to a later request whose prompt starts the same
// way. servelab has two, with one interface, chosen by --prefix-cache:
//   hash  (prefix_cache.h, Lab 4)  vLLM's: each full block named by a hash
//         chain over the tokens up to its end; LRU eviction over blocks.
//   radix (radix_cache.h, Lab 11)  SGLang's: a radix tree over token
//         sequences whose nodes own blocks; the longest shared prefix is one
//         walk from the root; eviction takes the least recently used
//         unlocked leaf.
// Both work in whole blocks (a partial block's contents are still changing),
// and both hold one allocator reference on every block they name, so a
// cached block outlives the sequence that computed it.
//
// A sequence's life, as KvBlockManager drives it:
//   match    at start: the prompt's cached leading blocks, and a handle
//            (PrefixNode) the sequence then holds — the radix cache locks
//            the matched path so it cannot be evicted under the sequence;
//   insert   after each forward pass that filled blocks: names them, and
//            returns the handle to hold from now on (the lock moves down);
//   lock     a fork (parallel sampling) holds the same handle once more;
//   release  at finish: the handle is let go and the blocks count as used now.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reference/kv/block_allocator.h"
#include "reference/model/tokenizer.h"

namespace servelab {

enum class PrefixCacheKind { kNone, kHash, kRadix };

// "hash", "radix" or "none"; throws servelab::Error for anything else.
PrefixCacheKind parse_prefix_cache_kind(const std::string& name);
const char* prefix_cache_kind_name(PrefixCacheKind kind);

// What a sequence holds in the cache: a radix node's id (the hash cache has
// no use for one and hands out kNoPrefixNode).
using PrefixNode = int64_t;
inline constexpr PrefixNode kNoPrefixNode = -1;

struct PrefixMatch {
    std::vector<BlockId> blocks;      // the matched leading blocks, in order (not retained)
    PrefixNode node = kNoPrefixNode;  // locked for the caller: release it at finish
};

class PrefixIndex {
  public:
    virtual ~PrefixIndex() = default;

    // The cached blocks of the longest cached prefix of `tokens`, in whole
    // blocks, at most `max_blocks`; marks them used now. The returned node is
    // locked: the caller must release it (or pass it to insert) exactly once.
    virtual PrefixMatch match(std::span<const TokenId> tokens, int64_t max_blocks) = 0;
    // How many leading whole blocks of `tokens` are cached. Changes nothing:
    // the question a cache-aware scheduler asks of every waiting request.
    virtual int64_t cached_prefix_blocks(std::span<const TokenId> tokens) const = 0;
    // A sequence holding `held` (from match or an earlier insert) has
    // computed `blocks`, its first blocks.size() full blocks, whose tokens
    // are tokens[0, blocks.size() · block_size). Names those not yet cached
    // (retaining them); a block whose content is cached under another block
    // already stays uncached. Returns the node the sequence holds from now
    // on, locked instead of `held`.
    virtual PrefixNode insert(std::span<const TokenId> tokens, std::span<const BlockId> blocks,
                              PrefixNode held) = 0;
    // One more holder of `node` (a fork of a sequence holding it).
    virtual void lock(PrefixNode node) = 0;
    // A holder of `node` is done with it; `blocks` (the sequence's table) are
    // marked used now, the last listed least recently.
    virtual void release(PrefixNode node, std::span<const BlockId> blocks) = 0;

    // Frees one cached block no sequence uses (its reference goes back to
    // the allocator). Returns false when there is none.
    virtual bool evict_one() = 0;
    // Blocks evict_one could free, one after another, right now.
    virtual int64_t num_evictable() const = 0;
    virtual int64_t num_cached_blocks() const = 0;
    virtual bool contains(BlockId block) const = 0;
};

// The cache of `kind` over `allocator` (which must outlive it), or nullptr
// for kNone.
std::unique_ptr<PrefixIndex> make_prefix_index(PrefixCacheKind kind, BlockAllocator& allocator,
                                               int64_t block_size);

}  // namespace servelab
