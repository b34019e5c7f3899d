// hidden_lab04_paged_attention_test.cpp — Lab 4's hidden tests (chapter 11.4): the
// block allocator, block tables with copy-on-write, the pool's block copy and the
// gather through the block table, on inputs the public tests do not use (odd pool
// and block sizes, a block size of 1, a pool exactly full, three holders of one
// block, shuffled block tables, key counts that are not a multiple of the block).
//
// The instructor's hidden tests: tools/labkit/student_release.py leaves this file out of
// the student release, so never quote it in a handout. They check the contracts the
// handout states, so a solution tuned to the public tests' shapes fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/paged_attention.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/block_table.h"
#include "reference/kv/paged_kv_cache.h"

namespace servelab {
namespace {

using test::GuardedArray;
using test::RandomSource;

// ---------------------------------------------------------------- the allocator

// Every block's count and the free count against the model's, after every step.
void expect_counts(const BlockAllocator& allocator, const std::vector<int32_t>& counts, int step) {
    int64_t free = 0;
    for (size_t b = 0; b < counts.size(); ++b) {
        free += counts[b] == 0;
        ASSERT_EQ(allocator.ref_count(BlockId(b)), counts[b])
            << "after operation " << step << ", block " << b
            << ": its count is the number of holders (try_allocate sets 1, retain adds one, "
               "release removes one)";
    }
    ASSERT_EQ(allocator.num_free(), free)
        << "after operation " << step << ": a block is free exactly when its count is 0";
}

// Random allocate / retain / release on a pool of 7 against a model: counts,
// the free list as a stack (the most recently freed block is reused first),
// nullopt and an error when the pool is empty, errors for blocks not in use.
TEST(HiddenLab04Allocator, RandomOperationsMatchAStackAndItsCounts) {
    RandomSource random(401);
    SCOPED_TRACE(random.trace());
    const int64_t n = 7;
    BlockAllocator allocator(n);
    std::vector<int32_t> counts(n, 0);
    std::vector<BlockId> stack;  // the model's free list, top at the back
    for (int64_t b = n - 1; b >= 0; --b) stack.push_back(BlockId(b));
    for (int step = 0; step < 3000; ++step) {
        const int64_t op = random.integer(0, 3);
        const BlockId block = BlockId(random.integer(0, n - 1));
        if (op == 0) {
            const std::optional<BlockId> got = allocator.try_allocate();
            if (stack.empty()) {
                ASSERT_FALSE(got.has_value()) << "try_allocate on an empty pool returns nullopt";
            } else {
                ASSERT_TRUE(got.has_value()) << "try_allocate with " << stack.size() << " free";
                ASSERT_EQ(*got, stack.back())
                    << "try_allocate must pop the top of the free list: the most recently "
                       "freed block is reused first";
                stack.pop_back();
                counts[size_t(*got)] = 1;
            }
        } else if (op == 1 && counts[size_t(block)] > 0) {
            allocator.retain(block);
            ++counts[size_t(block)];
        } else if (op >= 2 && counts[size_t(block)] > 0) {
            allocator.release(block);
            if (--counts[size_t(block)] == 0) stack.push_back(block);
        } else if (counts[size_t(block)] == 0) {
            EXPECT_THROW(op == 1 ? allocator.retain(block) : allocator.release(block), Error)
                << "block " << block << " is free: retain and release must reject it";
        }
        expect_counts(allocator, counts, step);
    }
}

// ---------------------------------------------------------------- block tables

// Appends to a table on a pool sized exactly for `tokens`, checking every
// slot after every append, then one more append at the boundary.
void append_until_the_pool_is_full(int64_t block_size, int64_t tokens) {
    const int64_t blocks = (tokens + block_size - 1) / block_size;
    BlockAllocator allocator(blocks);
    BlockTable table(block_size);
    std::vector<KvSlot> slots;
    for (int64_t t = 0; t < tokens; ++t) {
        const AppendResult result = table.append_slot(allocator);
        ASSERT_FALSE(result.copy.has_value()) << "a table nobody shares never copies";
        slots.push_back(result.slot);
        ASSERT_EQ(int64_t(table.blocks().size()), t / block_size + 1)
            << "block size " << block_size << ", token " << t
            << ": a new block only when the last one is full (or there is none)";
        ASSERT_EQ(result.slot.offset, t % block_size) << "token " << t << " sits at t % block_size";
        for (int64_t u = 0; u <= t; ++u) {
            const KvSlot slot = table.slot(u);
            ASSERT_TRUE(slot.block == table.blocks()[size_t(u / block_size)] &&
                        slot.offset == u % block_size && slot.block == slots[size_t(u)].block)
                << "block size " << block_size << ", after " << t + 1 << " appends: token " << u
                << " must stay in block blocks()[u / block_size] at offset u % block_size";
        }
    }
    ASSERT_EQ(allocator.num_free(), 0);
    if (tokens % block_size == 0) {  // the next token needs a block the pool does not have
        const std::vector<BlockId> before = table.blocks();
        EXPECT_THROW(table.append_slot(allocator), Error);
        EXPECT_TRUE(table.num_tokens() == tokens && table.blocks() == before)
            << "block size " << block_size
            << ": appending with no free block must throw and leave the table unchanged";
    } else {
        EXPECT_NO_THROW(table.append_slot(allocator))
            << "block size " << block_size << ": the last block has room, no block is needed";
    }
}

TEST(HiddenLab04BlockTable, NewBlocksOnlyAtBoundariesUpToAnExactlyFullPool) {
    for (const auto& [block_size, tokens] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 5}, {3, 9}, {3, 10}, {5, 17}, {16, 16}, {7, 1}}) {
        SCOPED_TRACE("block size " + std::to_string(block_size) + ", " + std::to_string(tokens) +
                     " tokens");
        append_until_the_pool_is_full(block_size, tokens);
    }
}

// Three holders of a partly filled block: each writer but the last copies it
// (counts 3 -> 2 -> 1), the last writes in place; freeing all tables returns
// every block exactly once.
TEST(HiddenLab04BlockTable, ThreeHoldersOfAPartialBlockCopyOnWriteInTurn) {
    const int64_t block_size = 3;
    BlockAllocator allocator(9);
    BlockTable original(block_size);
    for (int t = 0; t < 5; ++t) original.append_slot(allocator);  // blocks: full, 2 of 3
    BlockTable first = original.fork(allocator), second = original.fork(allocator);
    const BlockId shared = original.blocks().back(), full = original.blocks().front();
    EXPECT_TRUE(allocator.ref_count(shared) == 3 && allocator.ref_count(full) == 3)
        << "fork: every block of the table gains a holder (two forks: 3 holders)";
    EXPECT_EQ(allocator.num_used(), 2) << "a fork copies the table, not the blocks";
    int32_t holders = 3;
    for (BlockTable* writer : {&first, &second, &original}) {
        const AppendResult result = writer->append_slot(allocator);
        --holders;
        if (holders > 0) {
            ASSERT_TRUE(result.copy.has_value() && result.copy->from == shared &&
                        result.copy->to == writer->blocks().back() && result.copy->to != shared)
                << "writing into a shared, partly filled last block must first copy it into a "
                   "block of the writer's own (copy-on-write)";
            EXPECT_EQ(allocator.ref_count(shared), holders)
                << "the writer gives its share of the old block back";
        } else {
            EXPECT_FALSE(result.copy.has_value())
                << "the last holder of the block writes in place: nobody else reads it";
            EXPECT_EQ(writer->blocks().back(), shared);
        }
        EXPECT_EQ(result.slot.offset, 2);
        EXPECT_EQ(writer->blocks().front(), full) << "full blocks stay shared";
        EXPECT_EQ(allocator.ref_count(writer->blocks().back()), 1);
    }
    EXPECT_EQ(allocator.ref_count(full), 3);
    for (BlockTable* table : {&second, &original, &first}) {
        table->free(allocator);
        EXPECT_TRUE(table->blocks().empty() && table->num_tokens() == 0)
            << "free empties the table";
    }
    EXPECT_EQ(allocator.num_free(), 9) << "every block comes back exactly once";
}

// Copy-on-write with no free block: the append throws and nothing changes,
// neither the table nor the shared block's count.
TEST(HiddenLab04BlockTable, CopyOnWriteWithoutAFreeBlockChangesNothing) {
    BlockAllocator allocator(2);
    BlockTable table(4);
    for (int t = 0; t < 6; ++t) table.append_slot(allocator);  // both blocks, the last 2 of 4
    BlockTable fork = table.fork(allocator);
    const std::vector<BlockId> before = fork.blocks();
    EXPECT_THROW(fork.append_slot(allocator), Error);
    EXPECT_TRUE(fork.blocks() == before && fork.num_tokens() == 6 &&
                allocator.ref_count(before.back()) == 2 && allocator.num_free() == 0)
        << "with no block to copy into, append_slot must throw before changing anything: the "
           "table, its token count and the shared block's holders stay as they were";
    fork.free(allocator);
    EXPECT_FALSE(table.append_slot(allocator).copy.has_value())
        << "once the fork is gone the block has one holder again: no copy";
}

// ---------------------------------------------------------------- the pool

// Fills every row of every layer's keys and values of a 5-block pool with
// distinct numbers through the write path, copies one block onto another and
// checks every row of every block: the target's rows equal the source's in
// all layers, keys and values; every other block is untouched.
TEST(HiddenLab04Pool, CopyBlockCopiesEveryLayerKeysAndValuesOnly) {
    ModelConfig c;
    c.num_layers = 3, c.num_heads = 6, c.num_kv_heads = 3, c.head_dim = 5, c.v_head_dim = 5;
    c.dim = 30, c.rope_dim = 5, c.context_length = 64;
    const int64_t block_size = 3, blocks = 5, kv_dim = c.kv_dim();
    PagedKvCache cache(c, blocks, block_size);
    BlockTable table(block_size);
    std::vector<float> k(size_t(blocks * block_size * kv_dim)), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) k[i] = float(i) + 0.5f, v[i] = -float(i) - 0.25f;
    for (int64_t t = 0; t < blocks * block_size; ++t) table.append_slot(cache.allocator());
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
        std::vector<float> kl = k, vl = v;
        for (float& x : kl) x += float(1000 * layer);
        for (float& x : vl) x -= float(1000 * layer);
        cache.write(layer, table, 0, kl.data(), vl.data(), blocks * block_size);
    }
    const auto block_rows = [&](const float* pool, BlockId b) {
        return std::vector<float>(pool + b * block_size * kv_dim,
                                  pool + (b + 1) * block_size * kv_dim);
    };
    std::map<std::pair<int64_t, BlockId>, std::vector<float>> before;
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
        for (BlockId b = 0; b < blocks; ++b) {
            before[{2 * layer, b}] = block_rows(cache.keys(layer), b);
            before[{2 * layer + 1, b}] = block_rows(cache.values(layer), b);
        }
    }
    cache.copy_block({.from = 3, .to = 1});
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
        for (BlockId b = 0; b < blocks; ++b) {
            const BlockId expected_from = b == 1 ? 3 : b;
            EXPECT_EQ(block_rows(cache.keys(layer), b), (before[{2 * layer, expected_from}]))
                << "layer " << layer << ", keys of block " << b
                << (b == 1 ? ": copy_block must copy all block_size rows of every layer's keys"
                           : ": copy_block wrote outside the target block");
            EXPECT_EQ(block_rows(cache.values(layer), b), (before[{2 * layer + 1, expected_from}]))
                << "layer " << layer << ", values of block " << b
                << (b == 1 ? ": copy_block must copy the values too, in every layer"
                           : ": copy_block wrote outside the target block");
        }
    }
}

// ---------------------------------------------------------------- paged attention

// A block table of shuffled block ids; the pool holds the sequence's rows
// where the table says and garbage everywhere else.
struct PagedSetup {
    std::vector<int32_t> table;
    std::vector<float> keys_pool, values_pool;
};

PagedSetup scatter(RandomSource& random, const std::vector<float>& k, const std::vector<float>& v,
                   int64_t num_keys, int64_t block_size, int64_t kv_dim) {
    const int64_t used = (num_keys + block_size - 1) / block_size, pool_blocks = used + 3;
    PagedSetup setup;
    std::vector<int32_t> ids(static_cast<size_t>(pool_blocks));
    for (int32_t i = 0; i < int32_t(pool_blocks); ++i) ids[size_t(i)] = i;
    std::shuffle(ids.begin(), ids.end(), random.engine());
    setup.table.assign(ids.begin(), ids.begin() + used);
    setup.keys_pool = random.normal(size_t(pool_blocks * block_size * kv_dim), 50.0f);
    setup.values_pool = random.normal(setup.keys_pool.size(), 50.0f);
    for (int64_t j = 0; j < num_keys; ++j) {
        const int64_t row = setup.table[size_t(j / block_size)] * block_size + j % block_size;
        std::copy_n(k.begin() + j * kv_dim, kv_dim, setup.keys_pool.begin() + row * kv_dim);
        std::copy_n(v.begin() + j * kv_dim, kv_dim, setup.values_pool.begin() + row * kv_dim);
    }
    return setup;
}

// Block sizes of 1, 3 and 4 with key counts that are not multiples of them,
// one and several queries, GQA 3:1: paged attention over shuffled blocks
// equals attention over the same rows stored contiguously. The block table
// ends at a guard page: reading an entry past the last token's block crashes.
TEST(HiddenLab04PagedAttention, ShuffledBlocksEqualAContiguousCache) {
    RandomSource random(405);
    SCOPED_TRACE(random.trace());
    for (const auto& [block_size, s] :
         std::vector<std::pair<int64_t, AttentionShape>>{{1, {2, 5, 6, 2, 4}},
                                                         {3, {1, 10, 6, 2, 8}},
                                                         {4, {5, 13, 3, 1, 6}},
                                                         {3, {9, 9, 3, 3, 5}}}) {
        const int64_t kv_dim = s.num_kv_heads * s.head_dim;
        const std::vector<float> q =
            random.normal(size_t(s.num_queries * s.num_heads * s.head_dim));
        const std::vector<float> k = random.normal(size_t(s.num_keys * kv_dim));
        const std::vector<float> v = random.normal(size_t(s.num_keys * kv_dim));
        const PagedSetup setup = scatter(random, k, v, s.num_keys, block_size, kv_dim);
        const GuardedArray<int32_t> table(setup.table);
        std::vector<float> contiguous(q.size(), std::nanf(""));
        attention_causal(q.data(), k.data(), v.data(), contiguous.data(), s);
        GuardedArray<float> paged(q.size());  // NaN until written
        paged_attention(q.data(), setup.keys_pool.data(), setup.values_pool.data(), table.data(),
                        block_size, paged.data(), s);
        std::ostringstream what;
        what << "paged attention, block size " << block_size << ", " << s.num_keys << " keys in "
             << setup.table.size() << " shuffled blocks, " << s.num_queries
             << " queries: token j is row block_table[j / block_size] * block_size + j % "
                "block_size of the pool";
        EXPECT_TRUE(test::equal_or_explain(what.str(), paged.span(), contiguous, 1e-5));
        std::vector<int64_t> rows(3, -7);
        map_pool_rows(table.data(), block_size, s.num_keys, rows);
        ASSERT_EQ(rows.size(), size_t(s.num_keys));
        for (int64_t j = 0; j < s.num_keys; ++j) {
            ASSERT_EQ(rows[size_t(j)],
                      int64_t(setup.table[size_t(j / block_size)]) * block_size + j % block_size)
                << "map_pool_rows, block size " << block_size << ", token " << j;
        }
    }
}

}  // namespace
}  // namespace servelab
