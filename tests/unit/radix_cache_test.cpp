// radix_cache_test.cpp — Lab 11: the radix cache's match, split, insert, locks and eviction,
// one rule at a time (the property test, random operations against a brute-force model, is
// radix_cache_property_test.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/radix_cache.h"
#include "tests/unit/radix_test_util.h"

namespace servelab {
namespace {

using test::finish;
using test::run_prompt;
using test::Sequence;
using test::show;
using test::tokens_of;

constexpr int64_t kBlock = test::kRadixBlock;

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

// What num_evictable() after caching {1,2,3} and matching {1,2,9} says about match.
std::string why_evictable_after_divergence(int64_t evictable) {
    if (evictable == 3) {
        return "num_evictable() is 3: all three blocks stayed evictable under the request that "
               "matched two of them. match did not split the node {1,2,3} where the prompt "
               "diverges (block 3 against 9) and locked its parent instead: the request's two "
               "blocks can be evicted before its first forward pass (handout, section 3)";
    }
    if (evictable == 0) {
        return "num_evictable() is 0: match locked the whole node {1,2,3} instead of splitting "
               "it where the prompt diverges: block 3, which the request does not use, can "
               "never be evicted while it runs";
    }
    return "num_evictable() is " + std::to_string(evictable) +
           ": only block 3 is outside the request's path. match splits the node {1,2,3} after "
           "block 2, where the prompt diverges, and locks the head {1,2}";
}

// Handout, section 3: a request locks exactly the blocks it matched. A prompt
// that parts from a cached node inside it gets a node ending where the match
// ends only if match splits there.
TEST(RadixCache, MatchSplitsWhereThePromptDivergesAndLocksExactlyTheMatch) {
    BlockAllocator allocator(32);
    RadixCache cache(allocator, kBlock);
    Sequence a = run_prompt(cache, allocator, tokens_of({1, 2, 3}));
    const std::vector<BlockId> a_blocks = a.blocks;
    finish(cache, allocator, a);
    ASSERT_EQ(cache.num_evictable(), 3) << "a finished prompt's three blocks are all evictable";

    const PrefixMatch hit = cache.match(tokens_of({1, 2, 9}), 3);
    ASSERT_EQ(hit.blocks, std::vector<BlockId>(a_blocks.begin(), a_blocks.begin() + 2));
    EXPECT_EQ(cache.num_evictable(), 1) << why_evictable_after_divergence(cache.num_evictable());
    for (const RadixCache::NodeView& node : cache.nodes()) {
        if (node.id != hit.node) continue;
        EXPECT_EQ(node.blocks.empty() ? -1 : node.blocks.back(), a_blocks[1])
            << "match returned node " << node.id << ", holding " << show(node.blocks)
            << ": the node a request holds must end exactly at its last matched block ("
            << a_blocks[1] << "), so split the node where the prompt diverges";
    }
    ASSERT_TRUE(cache.evict_one()) << "block 3, past the divergence, is nobody's: evictable";
    EXPECT_FALSE(cache.contains(a_blocks[2])) << "the unused block 3 is the one to go";
    EXPECT_FALSE(cache.evict_one())
        << "a second eviction took a block the running request matched: match must lock "
           "the split's head {1,2}";
    cache.release(hit.node, {});
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
            << "(lock_ref > 0: a running sequence reads it). The candidates: lock (a node whose "
            << "lock_ref goes from 0 to 1 must leave the eviction set), evict_one (it takes only "
            << "eviction_order_'s first entry, an unlocked leaf, and frees its last block), or "
            << "insert (it locks the sequence's new end before unlocking the node it held)";
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

}  // namespace
}  // namespace servelab
