// device_step_plan_test.cpp — the host plan step of the CUDA backend, on the CPU.
//
// Issue 7. The plan is plain integer arrays (reference/device/device_step_plan.h),
// so it is tested everywhere, GPU or not: every slot must name the row the
// CPU pool would write, every chunk's last row and context length must be
// right, and padding must write nothing and attend to nothing.
#include <gtest/gtest.h>

#include "kernels/common/error.h"
#include "reference/device/device_step_plan.h"
#include "reference/kv/block_allocator.h"
#include "reference/kv/block_table.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

class DeviceStepPlanTest : public ::testing::Test {
  protected:
    // A table of `num_tokens` slots over blocks taken in a shuffled order.
    BlockTable table_of(int64_t num_tokens) {
        BlockTable table(kBlockSize);
        for (int64_t i = 0; i < num_tokens; ++i) table.append_slot(allocator_);
        return table;
    }
    std::vector<TokenId> tokens(int64_t n) {
        std::vector<TokenId> ids;
        for (int64_t i = 0; i < n; ++i) ids.push_back(TokenId(random_.integer(0, kVocab - 1)));
        return ids;
    }

    static constexpr int64_t kBlockSize = 4;
    static constexpr int64_t kVocab = 50;
    const DeviceStepLimits limits_{kVocab, 128, 64, kBlockSize};
    test::RandomSource random_;
    BlockAllocator allocator_{64};
};

TEST_F(DeviceStepPlanTest, FlattensChunksIntoSlotsRowsAndTables) {
    SCOPED_TRACE(random_.trace());
    // Scatter the allocator's free list so block ids are not 0, 1, 2, ...
    std::vector<BlockId> taken;
    for (int i = 0; i < 9; ++i) taken.push_back(*allocator_.try_allocate());
    for (int i : {7, 2, 5, 0}) allocator_.release(taken[size_t(i)]);

    // A prefill chunk of 6 after 3 cached tokens, and a decode token at position 10.
    const BlockTable a = table_of(9);
    const BlockTable b = table_of(11);
    const std::vector<TokenId> a_ids = tokens(6), b_ids = tokens(1);
    const std::vector<SequenceChunk> chunks = {{StepInput{a_ids, 3}, &a},
                                               {StepInput{b_ids, 10}, &b}};
    const DeviceStepPlan plan = plan_device_step(chunks, limits_);
    ASSERT_EQ(plan.num_tokens, 7);
    ASSERT_EQ(plan.num_seqs, 2);
    EXPECT_FALSE(plan.decode_only);
    EXPECT_EQ(plan.max_query_len, 6);
    EXPECT_EQ(plan.max_context_len, 11);
    EXPECT_EQ(plan.max_blocks_per_seq, 3);
    ASSERT_EQ(int64_t(plan.data.size()), plan.size());
    const int32_t* d = plan.data.data();
    for (int64_t t = 0; t < 7; ++t) {
        const bool in_a = t < 6;
        const BlockTable& table = in_a ? a : b;
        const int64_t position = in_a ? 3 + t : 10;
        const KvSlot slot = table.slot(position);
        EXPECT_EQ(d[plan.token_ids() + t], in_a ? a_ids[size_t(t)] : b_ids[0]);
        EXPECT_EQ(d[plan.positions() + t], position);
        EXPECT_EQ(d[plan.slot_mapping() + t], slot.block * kBlockSize + slot.offset);
    }
    EXPECT_EQ(d[plan.last_rows()], 5);
    EXPECT_EQ(d[plan.last_rows() + 1], 6);
    EXPECT_EQ(std::vector<int32_t>(d + plan.query_start(), d + plan.query_start() + 3),
              (std::vector<int32_t>{0, 6, 7}));
    EXPECT_EQ(d[plan.context_lens()], 9);
    EXPECT_EQ(d[plan.context_lens() + 1], 11);
    for (int s = 0; s < 2; ++s) {
        const BlockTable& table = s == 0 ? a : b;
        for (size_t i = 0; i < 3; ++i) {
            const int32_t expected = i < table.blocks().size() ? table.blocks()[i] : 0;
            EXPECT_EQ(d[plan.block_tables() + s * 3 + int64_t(i)], expected);
        }
    }
}

TEST_F(DeviceStepPlanTest, PadsADecodeBatchWithRowsThatWriteAndReadNothing) {
    SCOPED_TRACE(random_.trace());
    const BlockTable a = table_of(5), b = table_of(2), c = table_of(7);
    const std::vector<TokenId> ids = tokens(3);
    const std::vector<SequenceChunk> chunks = {{StepInput{std::span(ids).subspan(0, 1), 4}, &a},
                                               {StepInput{std::span(ids).subspan(1, 1), 1}, &b},
                                               {StepInput{std::span(ids).subspan(2, 1), 6}, &c}};
    const DeviceStepPlan plan = plan_device_step(chunks, limits_, /*pad_to_seqs=*/4,
                                                 /*min_blocks_per_seq=*/32);
    EXPECT_TRUE(plan.decode_only);
    ASSERT_EQ(plan.num_seqs, 4);
    ASSERT_EQ(plan.num_tokens, 4);
    EXPECT_EQ(plan.max_blocks_per_seq, 32);
    const int32_t* d = plan.data.data();
    EXPECT_EQ(d[plan.slot_mapping() + 3], -1);
    EXPECT_EQ(d[plan.context_lens() + 3], 0);
    EXPECT_EQ(d[plan.last_rows() + 3], 3);
    EXPECT_EQ(d[plan.query_start() + 4], 4);
    EXPECT_EQ(d[plan.context_lens() + 2], 7);
}

TEST_F(DeviceStepPlanTest, RefusesMalformedSteps) {
    const BlockTable a = table_of(3);
    std::vector<TokenId> ids = tokens(3);
    const auto plan = [&](std::vector<SequenceChunk> chunks, int64_t pad = 0) {
        return plan_device_step(chunks, limits_, pad);
    };
    EXPECT_THROW(plan({}), Error);
    EXPECT_THROW(plan({{StepInput{std::span(ids).subspan(0, 2), 0}, &a}}),
                 Error);  // ends at 2 of 3
    EXPECT_THROW(plan({{StepInput{ids, 0}, nullptr}}), Error);
    ids[1] = TokenId(kVocab);
    EXPECT_THROW(plan({{StepInput{ids, 0}, &a}}), Error);
    ids[1] = -1;
    EXPECT_THROW(plan({{StepInput{ids, 0}, &a}}), Error);
    ids[1] = 0;
    EXPECT_NO_THROW(plan({{StepInput{ids, 0}, &a}}));
    EXPECT_THROW(plan({{StepInput{ids, 0}, &a}}, 2), Error);  // a prefill batch is never padded
    StepInput all_logits{ids, 0, LogitsFor::kAllTokens};
    EXPECT_THROW(plan({{all_logits, &a}}), Error);
    // A block id beyond the pool (a table from a larger allocator).
    BlockAllocator big(200);
    for (int i = 0; i < 100; ++i) (void)big.try_allocate();
    BlockTable far(kBlockSize);
    for (int i = 0; i < 3; ++i) far.append_slot(big);
    EXPECT_THROW(plan({{StepInput{ids, 0}, &far}}), Error);
}

}  // namespace
}  // namespace servelab
