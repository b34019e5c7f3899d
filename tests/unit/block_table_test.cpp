// block_table_test.cpp — Lab 4: the block pool, block tables and copy-on-write.
//
// Unit tests for each rule, then a randomized property test: 10^5 random
// operations (new sequence, append, fork, free) on a small pool, checked
// against a shadow model. The fake KV data in the pool is each token's own
// value, so a missed copy-on-write (one sequence overwriting a block it
// shares) shows as a sibling whose tokens changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "kernels/common/error.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/block_table.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

TEST(BlockAllocator, HandsOutEveryBlockOnceThenRefuses) {
    BlockAllocator allocator(4);
    std::set<BlockId> seen;
    for (int i = 0; i < 4; ++i) seen.insert(allocator.allocate());
    EXPECT_EQ(seen.size(), 4u);
    EXPECT_EQ(allocator.num_free(), 0);
    EXPECT_FALSE(allocator.try_allocate().has_value());
    EXPECT_NE(test::error_of([&] { allocator.allocate(); }).find("out of KV-cache blocks"),
              std::string::npos);
}

TEST(BlockAllocator, ReferenceCountsFreeABlockExactlyOnce) {
    BlockAllocator allocator(2);
    const BlockId block = allocator.allocate();
    allocator.retain(block);
    EXPECT_EQ(allocator.ref_count(block), 2);
    allocator.release(block);
    EXPECT_EQ(allocator.ref_count(block), 1);
    EXPECT_EQ(allocator.num_free(), 1)
        << "after retain and one release the block is still held once: it goes back to the "
           "free list only when its count reaches 0, or two sequences would share a block "
           "that is also handed out again";
    allocator.release(block);
    EXPECT_EQ(allocator.num_free(), 2);
    EXPECT_NE(test::error_of([&] { allocator.release(block); }).find("which is free"),
              std::string::npos);
    EXPECT_THROW(allocator.retain(block), Error)
        << "retain of a free block must throw (check_in_use): a holder on a free block would "
           "share it with whoever allocates it next";
    EXPECT_THROW(allocator.release(7), Error)
        << "release of a block outside the pool must throw (check_in_use)";
}

TEST(BlockTable, AllocatesOnlyWhenTheLastBlockIsFull) {
    BlockAllocator allocator(8);
    BlockTable table(4);
    for (int64_t t = 0; t < 9; ++t) {
        const AppendResult r = table.append_slot(allocator);
        EXPECT_EQ(r.slot.offset, t % 4);
        EXPECT_FALSE(r.copy.has_value());
        EXPECT_EQ(int64_t(table.blocks().size()), t / 4 + 1);
    }
    EXPECT_EQ(allocator.num_used(), 3);  // 9 tokens in blocks of 4: 3 blocks, 3 slots spare
    table.free(allocator);
    EXPECT_EQ(allocator.num_free(), 8);
    EXPECT_EQ(table.num_tokens(), 0);
    EXPECT_TRUE(table.blocks().empty())
        << "after free() the table still lists " << table.blocks().size()
        << " released blocks: free must empty it";
}

TEST(BlockTable, ForkSharesBlocksAndCopiesTheLastOnFirstWrite) {
    BlockAllocator allocator(8);
    BlockTable parent(4);
    for (int i = 0; i < 6; ++i) parent.append_slot(allocator);  // one full block, one half
    BlockTable child = parent.fork(allocator);
    EXPECT_EQ(child.blocks(), parent.blocks());
    EXPECT_EQ(allocator.ref_count(parent.blocks()[0]), 2);
    EXPECT_EQ(allocator.num_used(), 2);

    const BlockId shared_last = parent.blocks()[1];
    const AppendResult r = child.append_slot(allocator);
    ASSERT_TRUE(r.copy.has_value())
        << "the child's first append goes into the half-full last block it shares with its "
           "parent (ref count 2): that block must be copied first (copy-on-write), or the "
           "child's token overwrites the parent's";
    EXPECT_EQ(r.copy->from, shared_last);
    EXPECT_EQ(r.copy->to, child.blocks()[1]);
    EXPECT_NE(child.blocks()[1], shared_last);
    EXPECT_EQ(r.slot.offset, 2);
    EXPECT_EQ(child.blocks()[0], parent.blocks()[0]);  // the full block stays shared
    EXPECT_EQ(allocator.ref_count(shared_last), 1);
    // The parent now holds its last block alone: no copy when it appends.
    EXPECT_FALSE(parent.append_slot(allocator).copy.has_value());
}

TEST(BlockTable, RunningOutOfBlocksLeavesTheTableUnchanged) {
    BlockAllocator allocator(1);
    BlockTable table(2);
    table.append_slot(allocator);
    table.append_slot(allocator);
    EXPECT_THROW(table.append_slot(allocator), Error);
    EXPECT_EQ(table.num_tokens(), 2);
    EXPECT_EQ(table.blocks().size(), 1u);
}

// The shadow model of the property test: what each live sequence holds.
struct Sequence {
    BlockTable table;
    std::vector<int64_t> tokens;  // the value written at each position
};

class PagedPool {
  public:
    PagedPool(int64_t num_blocks, int64_t block_size)
        : allocator(num_blocks),
          data_(size_t(num_blocks * block_size), -1),
          block_size_(block_size) {}

    // Appends one token to `seq`; false when the pool is full.
    bool append(Sequence& seq, int64_t value) {
        AppendResult r;
        try {
            r = seq.table.append_slot(allocator);
        } catch (const Error&) {
            return false;
        }
        if (r.copy) {
            std::copy_n(data_.begin() + r.copy->from * block_size_, block_size_,
                        data_.begin() + r.copy->to * block_size_);
        }
        data_[size_t(r.slot.block * block_size_ + r.slot.offset)] = value;
        seq.tokens.push_back(value);
        return true;
    }
    int64_t read(const Sequence& seq, int64_t token) const {
        const KvSlot slot = seq.table.slot(token);
        return data_[size_t(slot.block * block_size_ + slot.offset)];
    }

    BlockAllocator allocator;

  private:
    std::vector<int64_t> data_;
    int64_t block_size_;
};

// Reference counts equal the number of tables holding each block; free +
// used == total; every sequence reads back exactly what it wrote.
void check_invariants(const PagedPool& pool, const std::vector<Sequence>& sequences,
                      bool check_contents) {
    std::map<BlockId, int32_t> holders;
    for (const Sequence& seq : sequences) {
        ASSERT_EQ(seq.table.num_tokens(), int64_t(seq.tokens.size()));
        for (BlockId block : seq.table.blocks()) ++holders[block];
    }
    const BlockAllocator& allocator = pool.allocator;
    int64_t in_use = 0;
    for (BlockId block = 0; block < allocator.num_blocks(); ++block) {
        const auto it = holders.find(block);
        const int32_t expected = it == holders.end() ? 0 : it->second;
        ASSERT_EQ(allocator.ref_count(block), expected) << "block " << block;
        in_use += expected > 0 ? 1 : 0;
    }
    ASSERT_EQ(allocator.num_used(), in_use) << "leaked or double-freed blocks";
    ASSERT_EQ(allocator.num_free() + allocator.num_used(), allocator.num_blocks());
    if (!check_contents) return;
    for (const Sequence& seq : sequences) {
        for (int64_t t = 0; t < int64_t(seq.tokens.size()); ++t) {
            ASSERT_EQ(pool.read(seq, t), seq.tokens[size_t(t)]) << "token " << t;
        }
    }
}

TEST(BlockTable, RandomAllocateForkAppendFreeKeepsTheInvariants) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    constexpr int kOperations = 100'000;
    // At least 2: with one-token blocks no block is ever partly filled, so
    // copy-on-write never happens and a missing one could not show.
    const int64_t block_size = random.integer(2, 8);
    PagedPool pool(random.integer(8, 64), block_size);
    std::vector<Sequence> sequences;
    int64_t next_value = 0, appends = 0, forks = 0, frees = 0, pool_full = 0;
    for (int op = 0; op < kOperations; ++op) {
        const int64_t choice = random.integer(0, 99);
        if (sequences.empty() || (choice < 10 && sequences.size() < 16)) {
            sequences.push_back({BlockTable(block_size), {}});
        } else if (choice < 75) {
            Sequence& seq = sequences[size_t(random.integer(0, int64_t(sequences.size()) - 1))];
            const int64_t count = random.integer(1, 2 * block_size);
            for (int64_t i = 0; i < count; ++i, ++appends) {
                if (!pool.append(seq, next_value++)) {
                    ++pool_full;
                    break;
                }
            }
        } else if (choice < 87 && sequences.size() < 16) {
            const Sequence& parent =
                sequences[size_t(random.integer(0, int64_t(sequences.size()) - 1))];
            sequences.push_back({parent.table.fork(pool.allocator), parent.tokens});
            ++forks;
        } else {
            const size_t index = size_t(random.integer(0, int64_t(sequences.size()) - 1));
            sequences[index].table.free(pool.allocator);
            sequences.erase(sequences.begin() + int64_t(index));
            ++frees;
        }
        check_invariants(pool, sequences, op % 64 == 0);
        if (testing::Test::HasFatalFailure()) {
            FAIL() << "after operation " << op;
        }
    }
    check_invariants(pool, sequences, true);
    for (Sequence& seq : sequences) seq.table.free(pool.allocator);
    EXPECT_EQ(pool.allocator.num_free(), pool.allocator.num_blocks()) << "blocks leaked";
    // The mix must have exercised every path.
    EXPECT_GT(forks, 1000);
    EXPECT_GT(frees, 1000);
    EXPECT_GT(pool_full, 10);
    EXPECT_GT(appends, 5'000);
}

}  // namespace
}  // namespace servelab
