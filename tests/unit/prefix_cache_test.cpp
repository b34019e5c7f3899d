// prefix_cache_test.cpp — Lab 4: the prefix cache and the block manager.
//
// Unit tests for the hash chain, lookup, LRU eviction order, then a
// randomized property test: 10^5 random operations (start a request from one
// of a few shared prefixes, grow it, fork it, finish it) on a small pool with
// prefix caching. The fake "keys" written for a token are a function of the
// whole prefix up to it, exactly like real keys, so a prefix hit that returns
// the wrong block (a hash of the block alone, without its parent) shows as a
// sequence reading a value it would not have computed.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "kernels/common/error.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/kv/prefix_cache.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

using test::one_float_config;
using test::RandomSource;

// What a model would cache at `position`: depends on every token up to it.
float prefix_value(std::span<const TokenId> tokens, int64_t position) {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t i = 0; i <= position; ++i)
        h = (h ^ uint64_t(tokens[size_t(i)])) * 1099511628211ULL;
    return float(h % 1000003);
}

// Computes (writes) the reserved tokens [num_computed, table end) and commits.
void compute(KvBlockManager& kv, PagedSequence& seq, std::span<const TokenId> tokens) {
    for (int64_t p = seq.num_computed_tokens; p < seq.table.num_tokens(); ++p) {
        const float value = prefix_value(tokens, p);
        kv.cache().write(0, seq.table, p, &value, &value, 1);
    }
    kv.commit(seq, tokens);
}

float read_key(KvBlockManager& kv, const PagedSequence& seq, int64_t position) {
    const KvSlot slot = seq.table.slot(position);
    return kv.cache().keys(0)[slot.block * kv.cache().block_size() + slot.offset];
}

std::vector<TokenId> iota_tokens(int64_t n, TokenId first) {
    std::vector<TokenId> tokens(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = first + TokenId(i);
    return tokens;
}

TEST(PrefixCache, HashChainNamesTheWholePrefix) {
    const std::vector<TokenId> block = {5, 6, 7, 8};
    EXPECT_EQ(hash_block(kRootBlockHash, block), hash_block(kRootBlockHash, block));
    EXPECT_NE(hash_block(kRootBlockHash, block), hash_block(kRootBlockHash + 1, block));
    EXPECT_NE(hash_block(kRootBlockHash, block),
              hash_block(kRootBlockHash, std::vector<TokenId>{5, 6, 8, 7}));
    EXPECT_NE(hash_block(kRootBlockHash, std::vector<TokenId>{1, 2}),
              hash_block(kRootBlockHash, std::vector<TokenId>{1, 2, 0}));
}

TEST(PrefixCache, LookupFindsOnlyTheSameParentAndTokens) {
    BlockAllocator allocator(4);
    PrefixCache cache(allocator, 3);
    const std::vector<TokenId> tokens = {1, 2, 3};
    const BlockId block = allocator.allocate();
    EXPECT_TRUE(cache.insert(kRootBlockHash, tokens, block));
    EXPECT_EQ(allocator.ref_count(block), 2);  // the cache holds it too
    EXPECT_EQ(cache.lookup(kRootBlockHash, tokens), block);
    EXPECT_FALSE(cache.lookup(kRootBlockHash + 1, tokens).has_value());
    EXPECT_FALSE(cache.lookup(kRootBlockHash, std::vector<TokenId>{1, 2, 4}).has_value());
    // The same content under a second block is not cached twice.
    const BlockId twin = allocator.allocate();
    EXPECT_FALSE(cache.insert(kRootBlockHash, tokens, twin));
    EXPECT_EQ(allocator.ref_count(twin), 1);
}

TEST(PrefixCache, KeepsBlocksAfterFinishAndReusesThem) {
    const ModelConfig c = one_float_config();
    PagedKvCache pool(c, 16, 4);
    KvBlockManager kv(pool, /*enable_prefix_caching=*/true);
    const std::vector<TokenId> prompt = iota_tokens(10, 100);  // 2 full blocks + 2 tokens
    PagedSequence first = kv.start(prompt);
    EXPECT_EQ(first.num_computed_tokens, 0);
    ASSERT_TRUE(kv.reserve(first, 10));
    compute(kv, first, prompt);
    const std::vector<BlockId> first_blocks = first.table.blocks();
    kv.finish(first);
    EXPECT_EQ(pool.allocator().num_used(), 2);  // the two full blocks stay cached

    std::vector<TokenId> longer = prompt;
    longer.push_back(7);
    PagedSequence second = kv.start(longer);
    EXPECT_EQ(second.num_computed_tokens, 8);
    EXPECT_EQ(second.num_cached_prompt_tokens, 8);
    EXPECT_EQ(second.table.blocks()[0], first_blocks[0]);
    EXPECT_EQ(second.table.blocks()[1], first_blocks[1]);
    for (int64_t p = 0; p < 8; ++p) EXPECT_EQ(read_key(kv, second, p), prefix_value(longer, p));
    kv.finish(second);

    // A prompt of exactly 8 tokens hits only the first block: its last token
    // must be computed to get logits.
    const std::vector<TokenId> exact(prompt.begin(), prompt.begin() + 8);
    PagedSequence third = kv.start(exact);
    EXPECT_EQ(third.num_computed_tokens, 4);
    kv.finish(third);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedAndARequestsLastBlocksFirst) {
    const ModelConfig c = one_float_config();
    PagedKvCache pool(c, 8, 2);
    KvBlockManager kv(pool, true);
    const std::vector<TokenId> old_prompt = iota_tokens(7, 0);     // blocks a0 a1 a2 + 1 token
    const std::vector<TokenId> new_prompt = iota_tokens(5, 1000);  // blocks b0 b1 + 1 token
    PagedSequence old_seq = kv.start(old_prompt);
    ASSERT_TRUE(kv.reserve(old_seq, 7));
    compute(kv, old_seq, old_prompt);
    const std::vector<BlockId> a = old_seq.table.blocks();
    kv.finish(old_seq);
    PagedSequence new_seq = kv.start(new_prompt);
    ASSERT_TRUE(kv.reserve(new_seq, 5));
    compute(kv, new_seq, new_prompt);
    const std::vector<BlockId> b = new_seq.table.blocks();
    kv.finish(new_seq);
    PrefixIndex& cache = *kv.prefix_cache();
    ASSERT_EQ(cache.num_cached_blocks(), 5);

    // The older request goes first, and within it the last block first.
    const std::vector<BlockId> expected_order = {a[2], a[1], a[0], b[1], b[0]};
    for (BlockId block : expected_order) {
        EXPECT_TRUE(cache.contains(block));
        ASSERT_TRUE(cache.evict_one());
        EXPECT_FALSE(cache.contains(block)) << "expected block " << block << " to go next";
    }
    EXPECT_FALSE(cache.evict_one());
    EXPECT_EQ(pool.allocator().num_free(), 8);
}

TEST(PrefixCache, BlocksInUseAreNeverEvicted) {
    const ModelConfig c = one_float_config();
    PagedKvCache pool(c, 3, 2);
    KvBlockManager kv(pool, true);
    const std::vector<TokenId> prompt = iota_tokens(5, 0);
    PagedSequence seq = kv.start(prompt);
    ASSERT_TRUE(kv.reserve(seq, 5));  // all 3 blocks
    compute(kv, seq, prompt);
    EXPECT_EQ(kv.num_available_blocks(), 0);
    PagedSequence other = kv.start(iota_tokens(3, 50));
    EXPECT_FALSE(kv.reserve(other, 3));  // nothing evictable: both full blocks are in use
    EXPECT_EQ(other.table.num_tokens(), 0);
    kv.finish(seq);
    EXPECT_EQ(kv.num_available_blocks(), 3);
    EXPECT_TRUE(kv.reserve(other, 3));  // evicts cached blocks to make room
    kv.finish(other);
}

// ---- The property test ------------------------------------------------------

struct LiveSequence {
    PagedSequence kv;
    std::vector<TokenId> tokens;  // prompt + generated so far
};

// Reference counts equal the tables holding a block plus one if the prefix
// cache names it; free + used == total; every sequence reads back, at every
// computed position, the value its own prefix gives.
void check_invariants(KvBlockManager& kv, const std::vector<LiveSequence>& live,
                      bool check_contents) {
    std::map<BlockId, int32_t> holders;
    for (const LiveSequence& s : live) {
        ASSERT_EQ(s.kv.num_computed_tokens, s.kv.table.num_tokens());
        for (BlockId block : s.kv.table.blocks()) ++holders[block];
    }
    const BlockAllocator& allocator = kv.cache().allocator();
    const PrefixIndex& cache = *kv.prefix_cache();
    int64_t in_use = 0;
    for (BlockId block = 0; block < allocator.num_blocks(); ++block) {
        const auto it = holders.find(block);
        const int32_t expected =
            (it == holders.end() ? 0 : it->second) + (cache.contains(block) ? 1 : 0);
        ASSERT_EQ(allocator.ref_count(block), expected) << "block " << block;
        in_use += expected > 0 ? 1 : 0;
    }
    ASSERT_EQ(allocator.num_used(), in_use) << "leaked or double-freed blocks";
    ASSERT_EQ(allocator.num_free() + allocator.num_used(), allocator.num_blocks());
    if (!check_contents) return;
    for (const LiveSequence& s : live) {
        for (int64_t p = 0; p < s.kv.num_computed_tokens; ++p) {
            ASSERT_EQ(read_key(kv, s.kv, p), prefix_value(s.tokens, p)) << "position " << p;
        }
    }
}

TEST(KvBlockManager, RandomRequestsWithPrefixCachingKeepTheInvariants) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    constexpr int kOperations = 100'000;
    // At least 2, so that forks share partly filled blocks (copy-on-write).
    const int64_t block_size = random.integer(2, 6);
    PagedKvCache pool(one_float_config(), random.integer(12, 48), block_size);
    KvBlockManager kv(pool, true);
    // A few shared prefixes (system prompts), some of which extend others,
    // and a small vocabulary so that different prefixes share whole blocks.
    std::vector<std::vector<TokenId>> prefixes;
    for (int i = 0; i < 4; ++i) {
        std::vector<TokenId> p;
        for (int64_t n = random.integer(0, 4 * block_size); n > 0; --n) {
            p.push_back(TokenId(random.integer(0, 3)));
        }
        prefixes.push_back(p);
    }
    prefixes.push_back(prefixes[0]);
    for (int64_t n = 2 * block_size; n > 0; --n) prefixes.back().push_back(9);

    std::vector<LiveSequence> live;
    int64_t hit_tokens = 0, starts = 0, forks = 0, refused = 0, grown = 0;
    for (int op = 0; op < kOperations; ++op) {
        const int64_t choice = random.integer(0, 99);
        if (live.empty() || (choice < 20 && live.size() < 12)) {
            std::vector<TokenId> prompt = prefixes[size_t(random.integer(0, 4))];
            for (int64_t n = random.integer(1, 2 * block_size); n > 0; --n) {
                prompt.push_back(TokenId(random.integer(0, 3)));
            }
            LiveSequence s{kv.start(prompt), prompt};
            hit_tokens += s.kv.num_cached_prompt_tokens;
            ++starts;
            if (kv.reserve(s.kv, int64_t(prompt.size()) - s.kv.num_computed_tokens)) {
                compute(kv, s.kv, s.tokens);
                live.push_back(std::move(s));
            } else {
                kv.finish(s.kv);
                ++refused;
            }
        } else if (choice < 75) {
            LiveSequence& s = live[size_t(random.integer(0, int64_t(live.size()) - 1))];
            for (int64_t n = random.integer(1, block_size + 1); n > 0; --n) {
                if (!kv.reserve(s.kv, 1)) {
                    ++refused;
                    break;
                }
                s.tokens.push_back(TokenId(random.integer(0, 3)));
                compute(kv, s.kv, s.tokens);
                ++grown;
            }
        } else if (choice < 85 && live.size() < 12) {
            const LiveSequence& parent = live[size_t(random.integer(0, int64_t(live.size()) - 1))];
            live.push_back(LiveSequence{kv.fork(parent.kv), parent.tokens});
            ++forks;
        } else {
            const size_t index = size_t(random.integer(0, int64_t(live.size()) - 1));
            kv.finish(live[index].kv);
            live.erase(live.begin() + int64_t(index));
        }
        check_invariants(kv, live, op % 32 == 0);
        if (testing::Test::HasFatalFailure()) FAIL() << "after operation " << op;
    }
    check_invariants(kv, live, true);
    for (LiveSequence& s : live) kv.finish(s.kv);
    kv.clear_prefix_cache();
    EXPECT_EQ(pool.allocator().num_free(), pool.allocator().num_blocks()) << "blocks leaked";
    // The mix must have exercised every path: hits, forks, a full pool.
    EXPECT_GT(hit_tokens, 1000);
    EXPECT_GT(forks, 1000);
    EXPECT_GT(refused, 100);
    EXPECT_GT(grown, 10'000);
    EXPECT_GT(starts, 5'000);
}

}  // namespace
}  // namespace servelab
