// cuda_attention_test.cpp — the CUDA KV-pool writes and paged attention kernels against the CPU
// ones.
//
// CUDA backend (issue 7; chapters 11.4 and 11.5). Built only when nvcc was
// found; on a machine without a usable GPU every test reports skipped with
// the runtime's reason (the split planning, pure host arithmetic, still
// runs). Inputs are fresh random bf16 values, outputs are poisoned (0xFF
// bytes: NaN in bf16) before each launch. The shapes cover SmolLM2's GQA
// (9 query heads on 3 KV heads, 64 wide), MQA (8:1) and MHA (4:4), head
// widths that are not powers of two, block sizes 16, 7 and 1, block tables
// scattered through the pool in random order, and contexts of one token,
// of one block, of more than one tile, and of 3000 tokens. Tolerance as in
// cuda_kernels_test.cpp: |gpu − cpu| <= 2^-7 |cpu| + 1e-3 (one bf16
// rounding of the output plus fp32 arithmetic); exact for the pure copies.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <string>
#include <utility>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/kv_append.h"
#include "kernels/cuda/paged_decode_attention.h"
#include "kernels/cuda/paged_prefill_attention.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

using test::bf16;
using test::expect_bf16_close;
using test::on_device;
using test::rounded;
using test::to_bf16;
using test::to_float;

class CudaAttention : public test::CudaTest {};

// One attention configuration: query heads, KV heads, head width, block size.
struct AttentionCase {
    int64_t heads, kv_heads, head_dim, block_size;
};

// SmolLM2 (9:3, 64 wide), MQA (8:1, 128), MHA (4:4, 80), GQA 6:2 at 32 and
// 4:2 at 48 (not a power of two), and the widest head the kernels take; block
// sizes 16, 7, 5 and 1.
const AttentionCase kCases[] = {{9, 3, 64, 16}, {8, 1, 128, 7}, {4, 4, 80, 1},
                                {6, 2, 32, 16}, {4, 2, 48, 5},  {2, 1, 256, 16}};

// A pool holding every sequence's context_lens[s] tokens, each sequence's
// blocks scattered through it in random order (plus a few unused blocks).
struct PagedPool {
    int64_t max_blocks = 1;       // the row stride of tables
    std::vector<int32_t> tables;  // (num_seqs, max_blocks), −1 past a sequence's blocks
    std::vector<float> keys, values;
};

PagedPool make_pool(test::RandomSource& random, const std::vector<int32_t>& context_lens,
                    const AttentionCase& c) {
    PagedPool pool;
    int64_t total_blocks = 0;
    for (int32_t len : context_lens) {
        const int64_t blocks = (len + c.block_size - 1) / c.block_size;
        pool.max_blocks = std::max(pool.max_blocks, blocks);
        total_blocks += blocks;
    }
    std::vector<int32_t> physical(static_cast<size_t>(total_blocks + 5));
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), random.engine());
    pool.tables.assign(context_lens.size() * size_t(pool.max_blocks), -1);
    size_t next = 0;
    for (size_t s = 0; s < context_lens.size(); ++s) {
        for (int64_t b = 0; b < (context_lens[s] + c.block_size - 1) / c.block_size; ++b) {
            pool.tables[s * size_t(pool.max_blocks) + size_t(b)] = physical[next++];
        }
    }
    const size_t pool_size = physical.size() * size_t(c.block_size * c.kv_heads * c.head_dim);
    pool.keys = rounded(random.normal(pool_size));
    pool.values = rounded(random.normal(pool_size));
    return pool;
}

TEST_F(CudaAttention, KvAppendWritesTheSlotsRowsAndSkipsNegativeSlots) {
    SCOPED_TRACE(random_.trace());
    // SmolLM2's KV row (3 heads · 64) and a narrow odd row over many tokens
    // (more elements than one thread block covers).
    for (const auto& [num_tokens, kv_dim] :
         {std::pair<int64_t, int64_t>{12, 192}, {1000, 7}, {1, 192}}) {
        const int64_t pool_rows = num_tokens + 20;
        std::vector<int32_t> rows(static_cast<size_t>(pool_rows));
        std::iota(rows.begin(), rows.end(), 0);
        std::shuffle(rows.begin(), rows.end(), random_.engine());
        std::vector<int32_t> slots(rows.begin(), rows.begin() + num_tokens);  // distinct rows
        if (num_tokens > 1) {
            slots[0] = -1;  // the unused rows of a fixed-size batch
            slots[size_t(num_tokens) - 1] = -1;
            slots[size_t(num_tokens) / 2] = -7;
        }
        const std::vector<float> k =
            rounded(random_.normal(static_cast<size_t>(num_tokens * kv_dim)));
        const std::vector<float> v =
            rounded(random_.normal(static_cast<size_t>(num_tokens * kv_dim)));
        const std::vector<float> old_keys =
            rounded(random_.normal(static_cast<size_t>(pool_rows * kv_dim)));
        const std::vector<float> old_values =
            rounded(random_.normal(static_cast<size_t>(pool_rows * kv_dim)));
        std::vector<float> expected_keys = old_keys, expected_values = old_values;
        for (int64_t t = 0; t < num_tokens; ++t) {
            const int64_t slot = slots[size_t(t)];
            if (slot < 0) continue;
            for (int64_t d = 0; d < kv_dim; ++d) {
                expected_keys[size_t(slot * kv_dim + d)] = k[size_t(t * kv_dim + d)];
                expected_values[size_t(slot * kv_dim + d)] = v[size_t(t * kv_dim + d)];
            }
        }

        auto k_gpu = on_device(to_bf16(k));
        auto v_gpu = on_device(to_bf16(v));
        auto slots_gpu = on_device(slots);
        auto keys_gpu = on_device(to_bf16(old_keys));
        auto values_gpu = on_device(to_bf16(old_values));
        cuda::kv_append_bf16(k_gpu.data(), v_gpu.data(), slots_gpu.data(), keys_gpu.data(),
                             values_gpu.data(), num_tokens, kv_dim, 0);
        // Exact: a copy does no arithmetic, and skipped or untouched rows keep their old values.
        EXPECT_EQ(to_float(keys_gpu.download()), expected_keys) << num_tokens << "x" << kv_dim;
        EXPECT_EQ(to_float(values_gpu.download()), expected_values) << num_tokens << "x" << kv_dim;
    }
}

TEST_F(CudaAttention, KvCopyBlocksCopiesWholeBlocksAndNothingElse) {
    SCOPED_TRACE(random_.trace());
    for (const auto& [block_size, kv_dim] :
         {std::pair<int64_t, int64_t>{16, 192}, {7, 128}, {1, 64}}) {
        const int64_t num_blocks = 12;
        const std::vector<float> old_pool =
            rounded(random_.normal(static_cast<size_t>(num_blocks * block_size * kv_dim)));
        // Sources and destinations disjoint, as copy-on-write guarantees.
        const std::vector<int32_t> pairs = {2, 9, 0, 5, 11, 3, 2, 7};
        std::vector<float> expected = old_pool;
        const int64_t block_elements = block_size * kv_dim;
        for (size_t p = 0; p < pairs.size(); p += 2) {
            std::copy_n(old_pool.begin() + pairs[p] * block_elements, block_elements,
                        expected.begin() + pairs[p + 1] * block_elements);
        }
        auto pool_gpu = on_device(to_bf16(old_pool));
        auto pairs_gpu = on_device(pairs);
        cuda::kv_copy_blocks_bf16(pool_gpu.data(), pairs_gpu.data(), int64_t(pairs.size() / 2),
                                  block_size, kv_dim, 0);
        EXPECT_EQ(to_float(pool_gpu.download()), expected) << block_size << "x" << kv_dim;
    }
}

TEST_F(CudaAttention, PagedPrefillAttentionEqualsTheCpuPagedAttention) {
    SCOPED_TRACE(random_.trace());
    for (const AttentionCase& c : kCases) {
        SCOPED_TRACE(::testing::Message() << c.heads << ":" << c.kv_heads << " head_dim "
                                          << c.head_dim << " block_size " << c.block_size);
        // (q_len, context_len) per sequence: one fresh token; a decode step
        // as a chunk; a fresh prompt longer than one 32-row tile; chunks that
        // start after a cached prefix (one of them spanning three row tiles);
        // a block-sized chunk after one block; and two random chunks.
        std::vector<std::pair<int32_t, int32_t>> chunks = {
            {1, 1},
            {1, 45},
            {37, 37},
            {20, 170},
            {70, 70 + int32_t(random_.integer(1, 200))},
            {int32_t(c.block_size), int32_t(2 * c.block_size)}};
        for (int i = 0; i < 2; ++i) {
            const auto q_len = int32_t(random_.integer(1, 100));
            chunks.push_back({q_len, q_len + int32_t(random_.integer(0, 150))});
        }
        const int64_t num_seqs = int64_t(chunks.size());
        std::vector<int32_t> query_start = {0}, context_lens;
        int64_t max_query_len = 0;
        for (const auto& [q_len, context_len] : chunks) {
            query_start.push_back(query_start.back() + q_len);
            context_lens.push_back(context_len);
            max_query_len = std::max<int64_t>(max_query_len, q_len);
        }
        const int64_t num_query_tokens = query_start.back();
        const PagedPool pool = make_pool(random_, context_lens, c);
        const int64_t q_row = c.heads * c.head_dim;
        const std::vector<float> q =
            rounded(random_.normal(static_cast<size_t>(num_query_tokens * q_row)));

        std::vector<float> expected(q.size());
        for (int64_t s = 0; s < num_seqs; ++s) {
            const auto [q_len, context_len] = chunks[size_t(s)];
            const AttentionShape shape{q_len, context_len, c.heads, c.kv_heads, c.head_dim};
            const int64_t offset = query_start[size_t(s)] * q_row;
            paged_attention(q.data() + offset, pool.keys.data(), pool.values.data(),
                            pool.tables.data() + s * pool.max_blocks, c.block_size,
                            expected.data() + offset, shape);
        }

        auto q_gpu = on_device(to_bf16(q));
        auto keys_gpu = on_device(to_bf16(pool.keys));
        auto values_gpu = on_device(to_bf16(pool.values));
        auto tables_gpu = on_device(pool.tables);
        auto query_start_gpu = on_device(query_start);
        auto lens_gpu = on_device(context_lens);
        cuda::DeviceBuffer<bf16> out(q.size());
        out.fill_bytes(0xFF);
        const cuda::PagedPrefillShape shape{num_seqs,     num_query_tokens, max_query_len,
                                            c.heads,      c.kv_heads,       c.head_dim,
                                            c.block_size, pool.max_blocks};
        cuda::paged_prefill_attention_bf16(q_gpu.data(), keys_gpu.data(), values_gpu.data(),
                                           tables_gpu.data(), query_start_gpu.data(),
                                           lens_gpu.data(), out.data(), shape, 0);
        expect_bf16_close(to_float(out.download()), expected, "paged prefill attention");
    }
}

TEST_F(CudaAttention, PagedPrefillAttentionRejectsHeadsWiderThan256) {
    for (int64_t head_dim : {int64_t(0), int64_t(257), int64_t(512)}) {
        const cuda::PagedPrefillShape shape{1, 1, 1, 1, 1, head_dim, 16, 1};
        const std::string message = test::error_of([&] {
            cuda::paged_prefill_attention_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, shape, 0);
        });
        EXPECT_NE(message.find("head_dim"), std::string::npos) << message;
    }
}

TEST_F(CudaAttention, SplitKDecodeEqualsTheCpuPagedAttention) {
    SCOPED_TRACE(random_.trace());
    std::vector<AttentionCase> cases(std::begin(kCases), std::end(kCases));
    // 16 query heads of width 256 on one KV head: more than 48 KB of shared
    // memory per block, the path that opts in to more.
    cases.push_back({16, 1, 256, 16});
    for (const AttentionCase& c : cases) {
        SCOPED_TRACE(::testing::Message() << c.heads << ":" << c.kv_heads << " head_dim "
                                          << c.head_dim << " block_size " << c.block_size);
        // An unused batch row (0: zeros), one token, one block, a short and a
        // medium random context, and a long one (many splits, many tiles each).
        const int32_t long_len = 3000;
        const std::vector<int32_t> lens = {0,
                                           1,
                                           int32_t(c.block_size),
                                           int32_t(random_.integer(2, 100)),
                                           int32_t(random_.integer(100, 700)),
                                           long_len};
        const int64_t num_seqs = int64_t(lens.size());
        const PagedPool pool = make_pool(random_, lens, c);
        const int64_t q_row = c.heads * c.head_dim;
        const std::vector<float> q = rounded(random_.normal(static_cast<size_t>(num_seqs * q_row)));

        std::vector<float> expected(q.size(), 0.0f);  // zeros for the empty context
        for (int64_t s = 0; s < num_seqs; ++s) {
            if (lens[size_t(s)] == 0) continue;
            const AttentionShape shape{1, lens[size_t(s)], c.heads, c.kv_heads, c.head_dim};
            paged_attention(q.data() + s * q_row, pool.keys.data(), pool.values.data(),
                            pool.tables.data() + s * pool.max_blocks, c.block_size,
                            expected.data() + s * q_row, shape);
        }

        auto q_gpu = on_device(to_bf16(q));
        auto keys_gpu = on_device(to_bf16(pool.keys));
        auto values_gpu = on_device(to_bf16(pool.values));
        auto tables_gpu = on_device(pool.tables);
        auto lens_gpu = on_device(lens);
        const cuda::PagedDecodeShape shape{num_seqs,     c.heads,         c.kv_heads, c.head_dim,
                                           c.block_size, pool.max_blocks, long_len};
        // (splits, minimum piece): the planned splits for one sequence on an
        // H200; a graph's many splits over short contexts (the floor leaves
        // a few 64-key pieces, the rest of the grid idle); a single piece;
        // and more splits than any context has tokens with no floor (most
        // pieces empty, the long one's 1 token each).
        const std::pair<int64_t, int64_t> schedules[] = {
            {cuda::paged_decode_num_splits(
                 {1, c.heads, c.kv_heads, c.head_dim, c.block_size, pool.max_blocks, long_len},
                 132),
             cuda::kDecodeMinPieceTokens},
            {cuda::kDecodeMaxSplits, cuda::kDecodeMinPieceTokens},
            {1, cuda::kDecodeMinPieceTokens},
            {long_len + 1, 1}};
        for (const auto& [num_splits, min_piece_tokens] : schedules) {
            SCOPED_TRACE(::testing::Message()
                         << "num_splits " << num_splits << ", min piece " << min_piece_tokens);
            cuda::DeviceBuffer<float> workspace(
                static_cast<size_t>(cuda::paged_decode_workspace_floats(shape, num_splits)));
            workspace.fill_bytes(0xFF);  // stale partial results must never be read
            cuda::DeviceBuffer<bf16> out(q.size());
            out.fill_bytes(0xFF);
            cuda::paged_decode_attention_splitk_bf16(q_gpu.data(), keys_gpu.data(),
                                                     values_gpu.data(), tables_gpu.data(),
                                                     lens_gpu.data(), out.data(), shape, num_splits,
                                                     min_piece_tokens, workspace.data(), 0);
            const std::vector<float> gpu = to_float(out.download());
            expect_bf16_close(gpu, expected, "split-K paged decode attention");
            for (int64_t i = 0; i < q_row; ++i) {  // sequence 0 (length 0): exact zeros
                ASSERT_EQ(gpu[size_t(i)], 0.0f) << "empty context, element " << i;
            }
        }
    }
}

TEST_F(CudaAttention, SplitKDecodeRejectsBadSplitCounts) {
    const cuda::PagedDecodeShape shape{1, 9, 3, 64, 16, 1, 16};
    for (int64_t num_splits : {int64_t(0), int64_t(-1), int64_t(70000)}) {
        test::error_of([&] {
            cuda::paged_decode_attention_splitk_bf16(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                     nullptr, shape, num_splits, 64, nullptr, 0);
        });
    }
    const std::string message = test::error_of([&] {
        cuda::paged_decode_attention_splitk_bf16(nullptr, nullptr, nullptr, nullptr, nullptr,
                                                 nullptr, shape, 4, 0, nullptr, 0);
    });
    EXPECT_NE(message.find("min_piece_tokens"), std::string::npos) << message;
}

// Pure host arithmetic: runs with or without a GPU.
TEST(CudaAttentionPlan, DecodeSplitsFillTheGpuWithoutTinyPieces) {
    constexpr int64_t kH200Sms = 132;
    // SmolLM2's decode shape (9 query heads on 3 KV heads, 64 wide) for a batch and context.
    auto smollm2 = [](int64_t num_seqs, int64_t max_context_len) {
        return cuda::PagedDecodeShape{num_seqs, 9, 3, 64, 16, 512, max_context_len};
    };
    EXPECT_EQ(cuda::paged_decode_max_splits(0), 1);
    EXPECT_EQ(cuda::paged_decode_max_splits(1), 1);
    EXPECT_EQ(cuda::paged_decode_num_splits(smollm2(1, 1), kH200Sms), 1);
    int64_t previous = 1;
    for (int64_t len = 1; len <= 20000; ++len) {
        const int64_t splits = cuda::paged_decode_num_splits(smollm2(1, len), kH200Sms);
        ASSERT_GE(splits, previous) << len;  // never fewer splits for a longer context
        ASSERT_LE(splits, cuda::kDecodeMaxSplits) << len;
        ASSERT_LE(splits, cuda::paged_decode_max_splits(len)) << len;  // the workspace's bound
        if (splits > 1) {  // pieces of the longest context >= 64 tokens
            ASSERT_GE((len + splits - 1) / splits, cuda::kDecodeMinPieceTokens) << len;
        }
        previous = splits;
    }
    // Batch 1 at 3000 tokens: a block for about every SM of an H200.
    EXPECT_GE(3 * cuda::paged_decode_num_splits(smollm2(1, 3000), kH200Sms), kH200Sms);
    // More sequences, fewer splits. A graph sized for 8192 tokens once cut
    // every sequence into 64 pieces whatever the batch, and at batch 256 the
    // partial kernel then took three quarters of the step.
    previous = cuda::kDecodeMaxSplits;
    for (int64_t batch = 1; batch <= 256; batch *= 2) {
        const int64_t splits = cuda::paged_decode_num_splits(smollm2(batch, 8192), kH200Sms);
        EXPECT_LE(splits, previous) << batch;
        EXPECT_GE(batch * 3 * splits, kH200Sms) << batch;  // every SM has a block
        previous = splits;
    }
    EXPECT_LE(4 * cuda::paged_decode_num_splits(smollm2(256, 8192), kH200Sms),
              cuda::paged_decode_num_splits(smollm2(1, 8192), kH200Sms));

    const cuda::PagedDecodeShape shape{5, 9, 3, 64, 16, 10, 160};
    EXPECT_EQ(cuda::paged_decode_workspace_floats(shape, 7), 5 * 9 * 7 * (64 + 2));
}

}  // namespace
}  // namespace servelab
#endif
