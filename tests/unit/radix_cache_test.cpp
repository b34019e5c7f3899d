// radix_cache_test.cpp — Lab 11: the radix cache's match, split, insert, locks and eviction,
// and a property test of random operations against a brute-force model.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "reference/common/error.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/radix_cache.h"

namespace servelab {
namespace {

constexpr int64_t kBlock = 4;

// A sequence as the block manager keeps one: its tokens, its block table
// (each block retained once for it) and the node it holds.
struct Sequence {
    std::vector<TokenId> tokens;
    std::vector<BlockId> blocks;
    PrefixNode node = kNoPrefixNode;
};

// Runs `tokens` through the cache as a sequence would: takes the cached
// prefix, computes (allocates) the rest of its full blocks, names them.
Sequence run_prompt(RadixCache& cache, BlockAllocator& allocator,
                    const std::vector<TokenId>& tokens) {
    Sequence seq{tokens, {}, kNoPrefixNode};
    const int64_t full = int64_t(tokens.size()) / kBlock;
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

void finish(RadixCache& cache, BlockAllocator& allocator, Sequence& seq) {
    cache.release(seq.node, seq.blocks);
    for (BlockId block : seq.blocks) allocator.release(block);
    seq = {};
}

std::vector<TokenId> tokens_of(std::initializer_list<int> blocks) {
    // Block b of the result is four copies of its number: easy to read in failures.
    std::vector<TokenId> tokens;
    for (int b : blocks) tokens.insert(tokens.end(), size_t(kBlock), TokenId(b));
    return tokens;
}

// Every cached prefix (whole blocks) and the block that ends it, read off the tree.
std::map<std::vector<TokenId>, BlockId> cached_prefixes(const RadixCache& cache) {
    std::map<std::vector<TokenId>, BlockId> out;
    std::map<PrefixNode, std::vector<TokenId>> path;  // tokens from the root to a node's end
    for (const RadixCache::NodeView& node : cache.nodes()) {  // parents before children
        std::vector<TokenId> prefix =
            node.parent == kNoPrefixNode ? std::vector<TokenId>{} : path.at(node.parent);
        for (size_t j = 0; j < node.blocks.size(); ++j) {
            prefix.insert(prefix.end(), node.tokens.begin() + int64_t(j) * kBlock,
                          node.tokens.begin() + int64_t(j + 1) * kBlock);
            out[prefix] = node.blocks[j];
        }
        path[node.id] = prefix;
    }
    return out;
}

std::string show(const std::vector<BlockId>& blocks) {
    std::string out = "[";
    for (size_t i = 0; i < blocks.size(); ++i) out += (i ? " " : "") + std::to_string(blocks[i]);
    return out + "]";
}

TEST(RadixCache, MatchFindsTheLongestCachedPrefixInWholeBlocks) {
    BlockAllocator allocator(32);
    RadixCache cache(allocator, kBlock);
    Sequence a = run_prompt(cache, allocator, tokens_of({1, 2, 3}));
    const std::vector<BlockId> a_blocks = a.blocks;
    finish(cache, allocator, a);

    std::vector<TokenId> probe = tokens_of({1, 2, 9});
    EXPECT_EQ(cache.cached_prefix_blocks(probe), 2);
    PrefixMatch hit = cache.match(probe, 3);
    EXPECT_EQ(hit.blocks, std::vector<BlockId>(a_blocks.begin(), a_blocks.begin() + 2))
        << "match must return the cached blocks of the longest shared prefix, in order";
    cache.release(hit.node, {});
    // A block agreeing in all but its last token is not shared: whole blocks only.
    probe = tokens_of({1, 2, 3});
    probe.back() = 77;
    EXPECT_EQ(cache.cached_prefix_blocks(probe), 2);
    EXPECT_EQ(cache.match(probe, 1).blocks.size(), 1u) << "max_blocks caps the match";
    cache.check_invariants();
}

TEST(RadixCache, ASplitKeepsTheSuffixsBlocks) {
    BlockAllocator allocator(32);
    RadixCache cache(allocator, kBlock);
    Sequence a = run_prompt(cache, allocator, tokens_of({1, 2, 3, 4}));
    const std::vector<BlockId> a_blocks = a.blocks;
    // B parts from A after two blocks: A's node is split there.
    Sequence b = run_prompt(cache, allocator, tokens_of({1, 2, 7}));
    EXPECT_EQ(std::vector<BlockId>(b.blocks.begin(), b.blocks.begin() + 2),
              std::vector<BlockId>(a_blocks.begin(), a_blocks.begin() + 2));
    finish(cache, allocator, a);
    finish(cache, allocator, b);
    PrefixMatch again = cache.match(tokens_of({1, 2, 3, 4, 5}), 4);
    EXPECT_EQ(again.blocks, a_blocks)
        << "after a split at block 2, matching the first prompt again gave " << show(again.blocks)
        << ", not its blocks " << show(a_blocks)
        << ": a split that loses the suffix's KV (the part after the cut must keep its blocks "
           "and tokens, as the new node's child)";
    cache.release(again.node, {});
    EXPECT_EQ(cache.num_cached_blocks(), 5);
    cache.check_invariants();
}

void expect_all_cached(const RadixCache& cache, const std::vector<BlockId>& blocks,
                       const std::string& whose) {
    for (BlockId block : blocks) {
        EXPECT_TRUE(cache.contains(block))
            << "block " << block << " of " << whose << " was evicted: evicting a locked node "
            << "(lock_ref > 0: a running sequence reads it; locking must take it out of the "
            << "eviction set)";
    }
}

TEST(RadixCache, LockedNodesAreNeverEvicted) {
    BlockAllocator allocator(32);
    RadixCache cache(allocator, kBlock);
    Sequence running = run_prompt(cache, allocator, tokens_of({1, 2, 3}));
    Sequence done = run_prompt(cache, allocator, tokens_of({5, 6}));
    finish(cache, allocator, done);
    // A finished prompt, then matched again by a new request, which holds it
    // from admission on (before its own forward pass names anything).
    Sequence again = run_prompt(cache, allocator, tokens_of({8, 9}));
    finish(cache, allocator, again);
    const std::vector<TokenId> again_prompt = tokens_of({8, 9, 10});
    PrefixMatch admitted = cache.match(again_prompt, 2);
    for (BlockId block : admitted.blocks) allocator.retain(block);
    again = Sequence{again_prompt, admitted.blocks, admitted.node};
    // A running request whose cached path a finished, longer one extends.
    Sequence trunk = run_prompt(cache, allocator, tokens_of({4, 4}));
    Sequence longer = run_prompt(cache, allocator, tokens_of({4, 4, 7, 7}));
    finish(cache, allocator, longer);
    EXPECT_EQ(cache.num_evictable(), 4) << "{5, 6} and {7, 7} below {4, 4}";
    int64_t evicted = 0;
    while (cache.evict_one()) ++evicted;
    expect_all_cached(cache, running.blocks, "a running sequence");
    expect_all_cached(cache, again.blocks, "a finished prompt matched again by a running one");
    expect_all_cached(cache, trunk.blocks, "a running prefix whose unlocked child was evicted");
    EXPECT_EQ(evicted, 4) << "every unlocked block, and only those, can be evicted";
    finish(cache, allocator, running);
    finish(cache, allocator, again);
    finish(cache, allocator, trunk);
    EXPECT_EQ(cache.num_evictable(), 7);
    cache.check_invariants();
}

TEST(RadixCache, EvictsLeavesFirstAndKeepsTheRootPath) {
    BlockAllocator allocator(32);
    RadixCache cache(allocator, kBlock);
    // A shared trunk {1,2} with two branches; the trunk is the least recently
    // used node once the branches are touched after it.
    Sequence trunk = run_prompt(cache, allocator, tokens_of({1, 2}));
    finish(cache, allocator, trunk);
    Sequence left = run_prompt(cache, allocator, tokens_of({1, 2, 3, 4}));
    Sequence right = run_prompt(cache, allocator, tokens_of({1, 2, 5}));
    finish(cache, allocator, left);
    finish(cache, allocator, right);
    const PrefixMatch trunk_match = cache.match(tokens_of({1, 2}), 2);
    const std::vector<BlockId> trunk_blocks = trunk_match.blocks;
    cache.release(trunk_match.node, {});
    cache.release(cache.match(tokens_of({1, 2, 3, 4}), 4).node, {});  // left used last
    cache.check_invariants();
    // Three evictions: right's block, then left's two (last block first). The
    // trunk has children until then and must stay.
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(cache.evict_one());
        for (BlockId block : trunk_blocks) {
            ASSERT_TRUE(cache.contains(block))
                << "eviction " << i + 1 << " took block " << block << " of the shared trunk "
                << "while it still had children: eviction must take leaves only (an LRU "
                << "that evicts the root path strands everything below it)";
        }
        cache.check_invariants();
    }
    EXPECT_EQ(cache.cached_prefix_blocks(tokens_of({1, 2, 3, 4})), 2);
    ASSERT_TRUE(cache.evict_one());
    EXPECT_EQ(cache.cached_prefix_blocks(tokens_of({1, 2})), 1)
        << "a leaf loses its last block first: the root side of a path goes last";
}

TEST(RadixCache, EvictsTheLeastRecentlyUsedLeafFirst) {
    BlockAllocator allocator(32);
    RadixCache cache(allocator, kBlock);
    Sequence a = run_prompt(cache, allocator, tokens_of({1}));
    Sequence b = run_prompt(cache, allocator, tokens_of({2}));
    Sequence c = run_prompt(cache, allocator, tokens_of({3}));
    const BlockId a_block = a.blocks[0], b_block = b.blocks[0];
    finish(cache, allocator, b);
    finish(cache, allocator, a);
    finish(cache, allocator, c);
    cache.release(cache.match(tokens_of({2}), 1).node, {});  // b used again: now the newest
    ASSERT_TRUE(cache.evict_one());
    EXPECT_FALSE(cache.contains(a_block)) << "the least recently used leaf goes first";
    EXPECT_TRUE(cache.contains(b_block));
}

TEST(RadixCache, ForkedHoldersKeepAPathLockedUntilBothFinish) {
    BlockAllocator allocator(16);
    RadixCache cache(allocator, kBlock);
    Sequence first = run_prompt(cache, allocator, tokens_of({1, 2}));
    Sequence second = first;
    for (BlockId block : second.blocks) allocator.retain(block);
    cache.lock(second.node);
    finish(cache, allocator, first);
    EXPECT_EQ(cache.num_evictable(), 0) << "the fork still holds the path";
    EXPECT_FALSE(cache.evict_one());
    finish(cache, allocator, second);
    EXPECT_EQ(cache.num_evictable(), 2);
    EXPECT_THROW(cache.release(RadixCache::kRoot, {}), Error) << "unlocking more than locked";
}

// The property test: random prompts drawn from a few families (so that they
// share prefixes and part at random blocks), run, finished, forked and
// evicted at random, against a brute-force model of what must be cached.
TEST(RadixCacheProperty, RandomOperationsAgreeWithABruteForceModel) {
    for (uint64_t seed = 1; seed <= 40; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        std::mt19937_64 rng(seed);
        auto below = [&rng](int64_t n) { return int64_t(rng() % uint64_t(n)); };
        BlockAllocator allocator(24);
        RadixCache cache(allocator, kBlock);
        // The model: every cached prefix (whole blocks) and its block.
        std::map<std::vector<TokenId>, BlockId> model;
        std::vector<Sequence> live;
        // After each operation: what the tree caches must be what the model
        // inserted, less what was evicted; and what was evicted must have been
        // an unused leaf.
        auto check_against_model = [&] {
            const std::map<std::vector<TokenId>, BlockId> tree = cached_prefixes(cache);
            for (const auto& [key, block] : tree) {
                const auto found = model.find(key);
                ASSERT_TRUE(found != model.end() && found->second == block)
                    << "the tree caches a prefix of " << key.size() << " tokens under block "
                    << block << ", which no sequence named";
                if (int64_t(key.size()) > kBlock) {
                    const std::vector<TokenId> parent(key.begin(), key.end() - kBlock);
                    ASSERT_EQ(tree.count(parent), 1u)
                        << "a cached block outlived the block before it: eviction took an inner "
                           "node (an LRU that evicts the root path)";
                }
            }
            for (const Sequence& seq : live) {
                for (size_t k = 0; k < seq.blocks.size(); ++k) {
                    const std::vector<TokenId> key(seq.tokens.begin(),
                                                   seq.tokens.begin() + int64_t(k + 1) * kBlock);
                    const auto named = model.find(key);
                    if (named == model.end() || named->second != seq.blocks[k]) continue;
                    const auto kept = tree.find(key);
                    ASSERT_TRUE(kept != tree.end() && kept->second == seq.blocks[k])
                        << "evicted block " << seq.blocks[k] << ", which a live sequence uses";
                }
            }
            model = tree;
        };
        auto random_prompt = [&] {
            std::vector<TokenId> tokens;
            const int64_t length = 1 + below(6 * kBlock);
            const TokenId family = TokenId(below(3));
            for (int64_t i = 0; i < length; ++i) {
                // Mostly the family's own token sequence, sometimes a detour.
                tokens.push_back(below(8) == 0 ? TokenId(10 + below(3))
                                               : TokenId(family * 100 + i));
            }
            return tokens;
        };
        for (int step = 0; step < 300; ++step) {
            const int64_t op = below(10);
            if (op < 4 && live.size() < 4) {
                const std::vector<TokenId> prompt = random_prompt();
                const int64_t full = int64_t(prompt.size()) / kBlock;
                // Expected match: the longest run of cached prefixes.
                std::vector<BlockId> expected;
                for (int64_t k = 1; k <= full; ++k) {
                    const auto found = model.find(
                        std::vector<TokenId>(prompt.begin(), prompt.begin() + k * kBlock));
                    if (found == model.end()) break;
                    expected.push_back(found->second);
                }
                ASSERT_EQ(cache.cached_prefix_blocks(prompt), int64_t(expected.size()));
                // Enough blocks for the rest even if nothing more can be evicted?
                const int64_t need = full - int64_t(expected.size());
                if (allocator.num_free() + cache.num_evictable() < need + int64_t(expected.size()))
                    continue;
                Sequence seq = run_prompt(cache, allocator, prompt);
                ASSERT_EQ(std::vector<BlockId>(seq.blocks.begin(),
                                               seq.blocks.begin() + int64_t(expected.size())),
                          expected);
                // The blocks past the match are new names (an id may be one
                // evicted a moment ago, reused).
                for (int64_t k = int64_t(expected.size()) + 1; k <= full; ++k) {
                    model[std::vector<TokenId>(prompt.begin(), prompt.begin() + k * kBlock)] =
                        seq.blocks[size_t(k - 1)];
                }
                live.push_back(seq);
                check_against_model();
            } else if (op < 7 && !live.empty()) {
                const size_t i = size_t(below(int64_t(live.size())));
                finish(cache, allocator, live[i]);
                live.erase(live.begin() + int64_t(i));
            } else if (op < 8 && !live.empty() && live.size() < 4) {
                Sequence copy = live[size_t(below(int64_t(live.size())))];
                for (BlockId block : copy.blocks) allocator.retain(block);
                cache.lock(copy.node);
                live.push_back(copy);
            } else {
                const int64_t before = cache.num_cached_blocks();
                const bool evicted = cache.evict_one();
                if (evicted) {
                    ASSERT_EQ(cache.num_cached_blocks(), before - 1) << "one block per eviction";
                } else {
                    ASSERT_EQ(cache.num_evictable(), 0) << "evict_one refused an evictable block";
                }
                check_against_model();
            }
            ASSERT_NO_THROW(cache.check_invariants());
            ASSERT_EQ(cache.num_cached_blocks(), int64_t(model.size()));
            // Every block's reference count equals its owners: the cache (if
            // cached) and each live sequence whose table holds it.
            for (BlockId block = 0; block < BlockId(allocator.num_blocks()); ++block) {
                int64_t owners = cache.contains(block) ? 1 : 0;
                for (const Sequence& seq : live) {
                    owners += std::count(seq.blocks.begin(), seq.blocks.end(), block);
                }
                ASSERT_EQ(allocator.ref_count(block), owners) << "block " << block;
            }
        }
        for (Sequence& seq : live) finish(cache, allocator, seq);
        while (cache.evict_one()) {
        }
        EXPECT_EQ(allocator.num_free(), allocator.num_blocks()) << "every block back in the pool";
        EXPECT_EQ(cache.nodes().size(), 1u) << "only the root is left";
    }
}

}  // namespace
}  // namespace servelab
