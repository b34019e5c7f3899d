// hidden_lab11_radix_cache_test.cpp — Lab 11 (RadixAttention; chapter 11.7):
// the instructor's hidden tests of the radix cache's match, split, insert,
// locks and eviction.
//
// These are the course autograder's hidden tests: they are left out of the
// student release, so never quote them in handouts. They check the contracts
// the handout states on inputs the public tests do not use: a block size of
// 3 instead of 4, prompts that part at every depth of a long node (inside a
// block and at its edge), splits of splits, a sequence that inserts its
// blocks in several steps while a fork holds its path, two sequences that
// computed the same prompt, and every eviction of a whole drain checked
// against the tree as it was just before (an unlocked leaf, the least
// recently used, its last block). The expectations are computed here from
// the prompts (a brute-force longest common prefix), not by the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../unit/radix_test_util.h"
#include "../unit/test_util.h"
#include "kernels/common/error.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/radix_cache.h"

namespace servelab {
namespace {

using test::RandomSource;

constexpr int64_t kBlock = 3;  // tokens per block: not the public tests' 4

using test::finish;
using test::Sequence;

// Runs a prompt as the block manager does (match, compute the rest of its
// full blocks, insert them), with this file's block size.
Sequence run_prompt(RadixCache& cache, BlockAllocator& allocator,
                    const std::vector<TokenId>& tokens) {
    return test::run_prompt(cache, allocator, tokens, kBlock);
}

// The invariants, with the step named in the failure.
void expect_invariants(const RadixCache& cache, const std::string& after) {
    try {
        cache.check_invariants();
    } catch (const Error& error) {
        FAIL() << "after " << after << ": " << error.what();
    }
}

// Whole blocks that `a` and `b` share from the start.
int64_t common_whole_blocks(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
    int64_t n = 0;
    while ((n + 1) * kBlock <= int64_t(std::min(a.size(), b.size())) &&
           std::equal(a.begin() + n * kBlock, a.begin() + (n + 1) * kBlock, b.begin() + n * kBlock))
        ++n;
    return n;
}

// Random tokens from a small alphabet, so that prompts often agree for a while.
std::vector<TokenId> random_tokens(RandomSource& rng, int64_t n) {
    std::vector<TokenId> t(static_cast<size_t>(n));
    for (TokenId& x : t) x = TokenId(rng.integer(1, 3));
    return t;
}

// Probes that part from a cached prompt at `at`: the whole blocks before the
// first difference, in order; the request locks exactly them. `running`:
// the cached prompt is still held, so every split cuts a locked node and
// nothing may become evictable.
void expect_match_parts_at_every_token(RandomSource& rng, bool running) {
    BlockAllocator allocator(64);
    RadixCache cache(allocator, kBlock);
    const std::vector<TokenId> cached = random_tokens(rng, 7 * kBlock + 2);
    Sequence a = run_prompt(cache, allocator, cached);
    const std::vector<BlockId> a_blocks = a.blocks;
    if (!running) finish(cache, allocator, a);
    const int64_t unlocked = running ? 0 : 7;
    for (int64_t at = 0; at <= int64_t(cached.size()); ++at) {
        std::vector<TokenId> probe(cached.begin(), cached.begin() + at);
        probe.push_back(99);  // parts here
        probe.insert(probe.end(), 4, 7);
        const int64_t want = common_whole_blocks(probe, cached);
        ASSERT_EQ(cache.cached_prefix_blocks(probe), want)
            << "a prompt that parts from the cached one at token " << at;
        const PrefixMatch hit = cache.match(probe, 100);
        ASSERT_EQ(hit.blocks, std::vector<BlockId>(a_blocks.begin(), a_blocks.begin() + want))
            << "a prompt that parts from the cached one at token " << at << " (inside block "
            << at / kBlock << "): match returns the cached blocks of the whole blocks before the "
            << "first difference, in order";
        EXPECT_EQ(cache.num_evictable(), running ? 0 : 7 - want)
            << "parting at token " << at << (running ? " from a running prompt" : "")
            << ": the request must lock exactly the " << want << " blocks it matched (split the "
            << "node where the prompt parts and lock the head; the head of a split keeps the "
            << "locks of the node it was cut from)";
        expect_invariants(cache, "a match parting at token " + std::to_string(at));
        cache.release(hit.node, {});
        expect_invariants(cache, "the release of a match parting at token " + std::to_string(at));
        ASSERT_EQ(cache.num_evictable(), unlocked) << "after the release";
    }
    if (running) finish(cache, allocator, a);
}

// A long cached prompt (7 blocks), then probes that part from it at every
// token, once finished and once still running.
TEST(HiddenLab11Radix, MatchPartsFromALongNodeAtEveryToken) {
    RandomSource rng(1101);
    SCOPED_TRACE(rng.trace());
    for (bool running : {false, true}) {
        SCOPED_TRACE(running ? "the cached prompt still running" : "the cached prompt finished");
        expect_match_parts_at_every_token(rng, running);
    }
}

// Random prompts from a small alphabet, many sharing prefixes: after each is
// run and finished, every prompt so far matches as far as the longest common
// whole-block prefix with any cached prompt, capped by max_blocks.
TEST(HiddenLab11Radix, EveryPromptMatchesItsLongestCachedPrefixAfterEachInsert) {
    RandomSource rng(1102);
    SCOPED_TRACE(rng.trace());
    BlockAllocator allocator(512);  // never full: nothing is evicted
    RadixCache cache(allocator, kBlock);
    std::vector<std::vector<TokenId>> prompts;
    for (int i = 0; i < 24; ++i) {
        std::vector<TokenId> prompt =
            random_tokens(rng, rng.integer(1, 6) * kBlock + rng.integer(0, 2));
        if (!prompts.empty() && rng.integer(0, 1)) {  // extend or cut an earlier prompt
            const auto& base = prompts[size_t(rng.integer(0, int64_t(prompts.size()) - 1))];
            prompt.insert(
                prompt.begin(), base.begin(),
                base.begin() + rng.integer(0, std::min<int64_t>(int64_t(base.size()), 4 * kBlock)));
        }
        Sequence seq = run_prompt(cache, allocator, prompt);
        finish(cache, allocator, seq);
        prompts.push_back(prompt);
        expect_invariants(cache, "prompt " + std::to_string(i));
        for (const auto& probe : prompts) {
            int64_t want = 0;
            for (const auto& p : prompts) want = std::max(want, common_whole_blocks(probe, p));
            const int64_t cap = rng.integer(0, want + 1);
            ASSERT_EQ(cache.cached_prefix_blocks(probe), want)
                << "after " << i + 1 << " prompts: the longest cached prefix, in whole blocks";
            const PrefixMatch hit = cache.match(probe, cap);
            ASSERT_EQ(int64_t(hit.blocks.size()), std::min(want, cap))
                << "after " << i + 1 << " prompts, max_blocks " << cap << ": match takes the "
                << "longest cached prefix, at most max_blocks blocks";
            cache.release(hit.node, {});
        }
    }
}

// The unlocked leaves of the tree and the oldest one's last block.
BlockId expected_victim(const RadixCache& cache) {
    const std::vector<RadixCache::NodeView> nodes = cache.nodes();
    const RadixCache::NodeView* oldest = nullptr;
    for (const auto& node : nodes) {
        const bool has_child = std::any_of(nodes.begin(), nodes.end(),
                                           [&](const auto& n) { return n.parent == node.id; });
        if (node.id == RadixCache::kRoot || has_child || node.lock_ref > 0) continue;
        if (oldest == nullptr || node.last_used < oldest->last_used) oldest = &node;
    }
    return oldest == nullptr ? -1 : oldest->blocks.back();
}

// A branching tree, some paths touched again, one held by a running
// sequence: every eviction of a full drain takes the last block of the
// least recently used unlocked leaf, and the held path stays.
TEST(HiddenLab11Radix, EveryEvictionOfADrainTakesTheOldestUnlockedLeafsLastBlock) {
    RandomSource rng(1103);
    SCOPED_TRACE(rng.trace());
    BlockAllocator allocator(256);
    RadixCache cache(allocator, kBlock);
    const std::vector<TokenId> trunk = random_tokens(rng, 3 * kBlock);
    std::vector<std::vector<TokenId>> prompts;
    for (int i = 0; i < 10; ++i) {
        std::vector<TokenId> p(trunk.begin(), trunk.begin() + rng.integer(0, 3) * kBlock);
        const std::vector<TokenId> tail = random_tokens(rng, rng.integer(1, 4) * kBlock);
        p.insert(p.end(), tail.begin(), tail.end());
        prompts.push_back(p);
        Sequence seq = run_prompt(cache, allocator, p);
        finish(cache, allocator, seq);
    }
    for (int i = 0; i < 6; ++i)  // touch some paths again, in random order
        cache.release(cache.match(prompts[size_t(rng.integer(0, 9))], 100).node, {});
    // A request admitted on a cached prompt, before its forward pass: match only.
    const std::vector<TokenId>& admitted = prompts[size_t(rng.integer(0, 9))];
    const PrefixMatch hit = cache.match(admitted, int64_t(admitted.size()) / kBlock);
    Sequence held{admitted, hit.blocks, hit.node};
    for (BlockId block : held.blocks) allocator.retain(block);
    for (int step = 0;; ++step) {
        const BlockId want = expected_victim(cache);
        const int64_t evictable = cache.num_evictable();
        if (!cache.evict_one()) {
            ASSERT_EQ(want, -1) << "evict_one returned false with an unlocked leaf left";
            break;
        }
        ASSERT_NE(want, -1) << "eviction " << step << " freed a block of a locked path";
        ASSERT_FALSE(cache.contains(want))
            << "eviction " << step << " did not take block " << want << ", the last block of "
            << "the least recently used unlocked leaf (leaves only, the oldest first, a leaf's "
            << "last block first)";
        ASSERT_EQ(cache.num_evictable(), evictable - 1) << "one block fewer evictable";
        expect_invariants(cache, "eviction " + std::to_string(step));
    }
    for (BlockId block : held.blocks)
        EXPECT_TRUE(cache.contains(block)) << "a running sequence's block " << block << " evicted";
    EXPECT_EQ(cache.num_cached_blocks(), int64_t(held.blocks.size()));
    finish(cache, allocator, held);
    while (cache.evict_one()) {
    }
    EXPECT_EQ(allocator.num_free(), 256)
        << "after every block was evicted and every sequence finished, some blocks are still "
        << "referenced: evict_one must give the tree's reference on the block back";
}

// A sequence names its blocks in three inserts (chunked prefill) while a
// fork holds its path from the second on; the lock moves down with each
// insert and the path stays locked until both holders finish, in either order.
TEST(HiddenLab11Radix, ALockMovesDownWithEachInsertAndAForkHoldsItToo) {
    RandomSource rng(1104);
    SCOPED_TRACE(rng.trace());
    for (bool fork_finishes_first : {true, false}) {
        BlockAllocator allocator(64);
        RadixCache cache(allocator, kBlock);
        std::vector<TokenId> elsewhere = random_tokens(rng, 2 * kBlock);
        for (TokenId& t : elsewhere) t += 50;  // shares no block with the prompt below
        Sequence other = run_prompt(cache, allocator, elsewhere);
        finish(cache, allocator, other);  // 2 evictable blocks elsewhere
        const std::vector<TokenId> prompt = random_tokens(rng, 7 * kBlock);
        const PrefixMatch hit = cache.match(prompt, 7);
        std::vector<BlockId> blocks = hit.blocks;
        for (BlockId b : blocks) allocator.retain(b);
        PrefixNode node = hit.node, fork = kNoPrefixNode;
        for (int64_t upto : {2, 5, 7}) {
            while (int64_t(blocks.size()) < upto) blocks.push_back(allocator.allocate());
            node =
                cache.insert(prompt, std::span<const BlockId>(blocks.data(), size_t(upto)), node);
            if (upto == 2) cache.lock(fork = node);  // the fork holds the first two blocks
            expect_invariants(cache, "the insert of " + std::to_string(upto) + " blocks");
            ASSERT_EQ(cache.num_evictable(), 2)
                << "after inserting " << upto << " blocks: the sequence's whole path must stay "
                << "locked (insert locks the new end before unlocking the node it held)";
        }
        auto release_one = [&](PrefixNode n) { cache.release(n, blocks); };
        release_one(fork_finishes_first ? fork : node);
        EXPECT_EQ(cache.num_evictable(), fork_finishes_first ? 2 : 2 + 5)
            << (fork_finishes_first ? "the sequence" : "the fork") << " still holds its path";
        release_one(fork_finishes_first ? node : fork);
        EXPECT_EQ(cache.num_evictable(), 2 + 7) << "both holders done: every block evictable";
        expect_invariants(cache, "both releases");
        for (BlockId b : blocks) allocator.release(b);
    }
}

// Two sequences computed the same prompt at once (neither matched the other):
// the second's blocks stay out of the tree, it holds the first's path, and
// each later block of a longer prompt is named once.
TEST(HiddenLab11Radix, ASecondCopyOfCachedContentStaysUncached) {
    RandomSource rng(1105);
    SCOPED_TRACE(rng.trace());
    BlockAllocator allocator(64);
    RadixCache cache(allocator, kBlock);
    const std::vector<TokenId> prompt = random_tokens(rng, 4 * kBlock + 1);
    std::vector<TokenId> longer = prompt;
    longer.resize(4 * kBlock);
    const std::vector<TokenId> tail = random_tokens(rng, 2 * kBlock);
    longer.insert(longer.end(), tail.begin(), tail.end());
    Sequence first{prompt, {}, cache.match(prompt, 4).node},
        second{longer, {}, cache.match(longer, 6).node};
    for (int i = 0; i < 4; ++i) first.blocks.push_back(allocator.allocate());
    for (int i = 0; i < 6; ++i) second.blocks.push_back(allocator.allocate());
    first.node = cache.insert(prompt, first.blocks, first.node);
    second.node = cache.insert(longer, second.blocks, second.node);
    expect_invariants(cache, "two inserts of the same first four blocks");
    EXPECT_EQ(cache.num_cached_blocks(), 6) << "four shared blocks and the longer prompt's two";
    for (int i = 0; i < 4; ++i) {
        EXPECT_TRUE(cache.contains(first.blocks[size_t(i)]));
        EXPECT_FALSE(cache.contains(second.blocks[size_t(i)]))
            << "block " << i << " of the second copy: the tree has that content already";
    }
    EXPECT_EQ(cache.num_evictable(), 0) << "both sequences hold their paths";
    std::vector<BlockId> named(first.blocks);  // what the tree holds for `longer`
    named.insert(named.end(), second.blocks.begin() + 4, second.blocks.end());
    finish(cache, allocator, first);
    EXPECT_EQ(cache.num_evictable(), 0) << "the second sequence's path runs through the first's";
    const PrefixMatch again = cache.match(longer, 6);
    EXPECT_EQ(again.blocks, named) << "the longer prompt's cached blocks: the first copy's four, "
                                   << "then its own two (each content named once)";
    cache.release(again.node, {});
    // A third sequence, computed without a match too, parts from the
    // four-block node after three blocks (one short of its end): its insert
    // must split that node.
    std::vector<TokenId> parted(prompt.begin(), prompt.begin() + 3 * kBlock);
    parted.insert(parted.end(), 2 * kBlock, 55);
    Sequence third{parted, {}, cache.match(parted, 0).node};
    for (int i = 0; i < 5; ++i) third.blocks.push_back(allocator.allocate());
    third.node = cache.insert(parted, third.blocks, third.node);
    expect_invariants(cache, "an insert that parts inside a cached node");
    EXPECT_EQ(cache.num_cached_blocks(), 8) << "the parted prompt adds its last two blocks";
    std::vector<BlockId> third_path(named.begin(), named.begin() + 3);
    third_path.insert(third_path.end(), third.blocks.begin() + 3, third.blocks.end());
    const PrefixMatch parted_hit = cache.match(parted, 5);
    EXPECT_EQ(parted_hit.blocks, third_path)
        << "an insert whose tokens part inside a node splits it there: the shared head's "
        << "three blocks, then the new leaf's two";
    cache.release(parted_hit.node, {});
    finish(cache, allocator, third);
    finish(cache, allocator, second);
    EXPECT_EQ(cache.num_evictable(), 8);
    expect_invariants(cache, "all finished");
}

}  // namespace
}  // namespace servelab
