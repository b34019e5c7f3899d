// radix_test_util.h — Lab 11's test helpers: sequences run through a radix cache as the block
// manager runs them, prompts written as block numbers, and the tree read back as prefixes.
//
// Shared by radix_cache_test.cpp (one rule at a time) and radix_cache_property_test.cpp (random
// operations against a brute-force model).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "reference/kv/block_allocator.h"
#include "reference/kv/radix_cache.h"

namespace servelab::test {

inline constexpr int64_t kRadixBlock = 4;  // tokens per block in every radix test

// A sequence as the block manager keeps one: its tokens, its block table
// (each block retained once for it) and the node it holds.
struct Sequence {
    std::vector<TokenId> tokens;
    std::vector<BlockId> blocks;
    PrefixNode node = kNoPrefixNode;
};

// Runs `tokens` through the cache as a sequence would: takes the cached
// prefix, computes (allocates) the rest of its full blocks, names them.
// `block_size` is the cache's tokens per block.
inline Sequence run_prompt(RadixCache& cache, BlockAllocator& allocator,
                           const std::vector<TokenId>& tokens, int64_t block_size = kRadixBlock) {
    Sequence seq{tokens, {}, kNoPrefixNode};
    const int64_t full = int64_t(tokens.size()) / block_size;
    PrefixMatch hit = cache.match(tokens, full);
    for (BlockId block : hit.blocks) allocator.retain(block);
    seq.blocks = hit.blocks;
    seq.node = hit.node;
    while (int64_t(seq.blocks.size()) < full) {
        while (allocator.num_free() == 0 && cache.evict_one()) {
        }
        seq.blocks.push_back(allocator.allocate());
    }
    seq.node = cache.insert(tokens, seq.blocks, seq.node);
    return seq;
}

inline void finish(RadixCache& cache, BlockAllocator& allocator, Sequence& seq) {
    cache.release(seq.node, seq.blocks);
    for (BlockId block : seq.blocks) allocator.release(block);
    seq = {};
}

// Block b of the result is four copies of its number: easy to read in failures.
inline std::vector<TokenId> tokens_of(std::initializer_list<int> blocks) {
    std::vector<TokenId> tokens;
    for (int b : blocks) tokens.insert(tokens.end(), size_t(kRadixBlock), TokenId(b));
    return tokens;
}

// Every cached prefix (whole blocks) and the block that ends it, read off the tree.
inline std::map<std::vector<TokenId>, BlockId> cached_prefixes(const RadixCache& cache) {
    std::map<std::vector<TokenId>, BlockId> out;
    std::map<PrefixNode, std::vector<TokenId>> path;  // tokens from the root to a node's end
    for (const RadixCache::NodeView& node : cache.nodes()) {  // parents before children
        std::vector<TokenId> prefix =
            node.parent == kNoPrefixNode ? std::vector<TokenId>{} : path.at(node.parent);
        for (size_t j = 0; j < node.blocks.size(); ++j) {
            prefix.insert(prefix.end(), node.tokens.begin() + int64_t(j) * kRadixBlock,
                          node.tokens.begin() + int64_t(j + 1) * kRadixBlock);
            out[prefix] = node.blocks[j];
        }
        path[node.id] = prefix;
    }
    return out;
}

// "[3 7 9]"
inline std::string show(const std::vector<BlockId>& blocks) {
    std::string out = "[";
    for (size_t i = 0; i < blocks.size(); ++i) out += (i ? " " : "") + std::to_string(blocks[i]);
    return out + "]";
}

}  // namespace servelab::test
