// paged_flash_attention_test.cpp — the key-split online-softmax kernel equals paged_attention.
//
// Chapter 11.4 / 11.7 (FlashAttention's online softmax on the CPU).
// paged_flash_attention splits each query's keys into ranges, runs an
// online softmax over each
// and merges the (max, sum, output) triples; paged_attention holds every
// score and normalizes once. On fresh random pools with scattered blocks,
// for head sizes that take the AVX-512 kernel (64, 128) and the portable
// loops (16, 48), GQA groups of 1 to 8 heads, 1 to 40 query tokens and
// contexts that are not multiples of the tile or the split, the two must
// agree to float rounding, in every output (poisoned with NaN first).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_flash_attention.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

struct Case {
    int64_t head_dim, num_heads, num_kv_heads, num_queries, num_keys, block_size;
    float spread;  // score magnitudes: large ones make the running max jump
};

// Compares the two kernels on one random case; returns the worst error.
double worst_difference(RandomSource& rng, const Case& c) {
    const AttentionShape shape{c.num_queries, c.num_keys, c.num_heads, c.num_kv_heads, c.head_dim};
    const int64_t num_blocks_used = (c.num_keys + c.block_size - 1) / c.block_size;
    const int64_t pool_blocks = num_blocks_used + 5;
    // A shuffled block table: logical neighbours are rarely pool neighbours.
    std::vector<int32_t> blocks(static_cast<size_t>(pool_blocks), 0);
    std::iota(blocks.begin(), blocks.end(), 0);
    for (size_t i = blocks.size() - 1; i > 0; --i) {
        std::swap(blocks[i], blocks[size_t(rng.integer(0, int64_t(i)))]);
    }
    blocks.resize(size_t(num_blocks_used));
    const size_t pool_floats = size_t(pool_blocks * c.block_size * c.num_kv_heads * c.head_dim);
    const std::vector<float> keys = rng.normal(pool_floats, c.spread);
    const std::vector<float> values = rng.normal(pool_floats);
    const std::vector<float> q = rng.normal(size_t(c.num_queries * c.num_heads * c.head_dim));
    const size_t out_floats = q.size();
    std::vector<float> want(out_floats, NAN), got(out_floats, NAN);
    paged_attention(q.data(), keys.data(), values.data(), blocks.data(), c.block_size, want.data(),
                    shape);
    paged_flash_attention(q.data(), keys.data(), values.data(), blocks.data(), c.block_size,
                          got.data(), shape);
    double worst = 0.0;
    for (size_t i = 0; i < out_floats; ++i) {
        if (!std::isfinite(got[i])) return INFINITY;  // a poisoned output left unwritten, or a NaN
        worst = std::max(worst, double(std::fabs(got[i] - want[i])));
    }
    return worst;
}

TEST(PagedFlashAttention, EqualsPagedAttentionOnRandomPools) {
    RandomSource rng;
    const int64_t head_dims[] = {64, 128, 16, 48};
    const std::pair<int64_t, int64_t> layouts[] = {{9, 3}, {8, 1}, {4, 4}, {6, 2}, {2, 1}};
    for (int trial = 0; trial < 60; ++trial) {
        const auto [heads, kv_heads] = layouts[size_t(trial) % std::size(layouts)];
        Case c;
        c.head_dim = head_dims[size_t(trial / 5) % std::size(head_dims)];
        c.num_heads = heads;
        c.num_kv_heads = kv_heads;
        c.num_queries = rng.integer(1, 40);
        c.num_keys = c.num_queries + rng.integer(0, trial % 3 == 0 ? 1200 : 90);
        c.block_size = trial % 2 == 0 ? 16 : rng.integer(1, 20);
        c.spread = trial % 4 == 0 ? 4.0f : 1.0f;
        const double worst = worst_difference(rng, c);
        // Values are N(0, 1) and the output a convex combination of them: an
        // absolute tolerance is a relative one.
        ASSERT_LT(worst, 2e-5) << fmt::format(
            "head_dim {}, {} heads / {} KV heads, {} queries, {} keys, block size {}, spread {}: "
            "the split kernel must equal paged_attention (a missing rescale, or a merge that "
            "adds unnormalized partials, shows here); {}",
            c.head_dim, c.num_heads, c.num_kv_heads, c.num_queries, c.num_keys, c.block_size,
            c.spread, rng.trace());
    }
}

TEST(PagedFlashAttention, OneKeyAndTileEdges) {
    RandomSource rng;
    // One key (the first decode step of a one-token prompt), and contexts one
    // either side of the 16-key tile and of a 128-key range.
    for (const int64_t num_keys : {1, 15, 16, 17, 127, 128, 129, 257}) {
        for (const int64_t head_dim : {64, 16}) {
            const Case c{head_dim, 9, 3, 1, num_keys, 16, 1.0f};
            EXPECT_LT(worst_difference(rng, c), 2e-5)
                << num_keys << " keys, head_dim " << head_dim << "; " << rng.trace();
        }
    }
}

TEST(PagedFlashAttention, RefusesAMalformedShape) {
    const std::vector<float> data(64, 1.0f);
    const std::vector<int32_t> blocks = {0};
    std::vector<float> out(64);
    EXPECT_THROW(paged_flash_attention(data.data(), data.data(), data.data(), blocks.data(), 4,
                                       out.data(), AttentionShape{2, 1, 1, 1, 16}),
                 Error);
}

TEST(PagedFlashAttention, AQueryComputesTheSameBitsWhateverSharesItsStep) {
    // Greedy speculative decoding must equal plain decoding token for token:
    // a verification pass's queries (several per step) must give exactly
    // the bits one query alone gives. 40 queries over 3,000 keys take the
    // kernel's other schedule (a work item per query and KV head).
    RandomSource rng;
    const int64_t head_dim = 64, heads = 9, kv_heads = 3, block_size = 16;
    for (const auto& [batch, num_keys] :
         {std::pair<int64_t, int64_t>{5, rng.integer(200, 700)}, {40, 3000}}) {
        const int64_t blocks = (num_keys + block_size - 1) / block_size;
        std::vector<int32_t> table(static_cast<size_t>(blocks), 0);
        std::iota(table.begin(), table.end(), 0);
        const size_t pool = size_t(blocks * block_size * kv_heads * head_dim);
        const std::vector<float> keys = rng.normal(pool), values = rng.normal(pool);
        const std::vector<float> q = rng.normal(size_t(batch * heads * head_dim));
        std::vector<float> together(q.size(), NAN);
        paged_flash_attention(q.data(), keys.data(), values.data(), table.data(), block_size,
                              together.data(), {batch, num_keys, heads, kv_heads, head_dim});
        for (int64_t t = 0; t < batch; ++t) {
            std::vector<float> alone(size_t(heads * head_dim), NAN);
            paged_flash_attention(q.data() + t * heads * head_dim, keys.data(), values.data(),
                                  table.data(), block_size, alone.data(),
                                  {1, num_keys - batch + t + 1, heads, kv_heads, head_dim});
            for (size_t i = 0; i < alone.size(); ++i) {
                ASSERT_EQ(alone[i], together[size_t(t * heads * head_dim) + i])
                    << "query " << t << " of " << batch << " over " << num_keys << " keys, output "
                    << i << ": the key ranges must not depend on the step's other queries; "
                    << rng.trace();
            }
        }
    }
}

}  // namespace
}  // namespace servelab
