// paged_attention_test.cpp — Lab 4: attention through a block table equals
// attention over a contiguous cache.
//
// The same random keys and values go into Lab 2's contiguous KvCache and
// into a paged pool whose blocks are scattered (two sequences append in
// turns, so neighbouring logical blocks are rarely neighbours in the pool);
// both attentions must agree, for random lengths, block sizes and head
// layouts, and a forked sequence must read its own copy after its first write.
#include <gtest/gtest.h>

#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/paged_attention.h"
#include "reference/kv/kv_cache.h"
#include "reference/kv/paged_kv_cache.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/model_config.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

ModelConfig tiny_config(int64_t heads, int64_t kv_heads) {
    const auto bytes = make_tiny_model(
        {.num_layers = 2, .dim = heads * 8, .num_heads = heads, .num_kv_heads = kv_heads});
    return ModelConfig::from_gguf(GgufFile::parse(bytes));
}

std::vector<float> contiguous_attention(const ModelConfig& c, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v,
                                        int64_t num_queries, int64_t num_keys) {
    KvCache cache(c, num_keys);
    cache.write(1, 0, k.data(), v.data(), num_keys);
    std::vector<float> out(q.size(), NAN);
    attention_over_kv(q.data(), cache.keys(1), cache.values(1), out.data(),
                      {num_queries, num_keys, c.num_heads, c.num_kv_heads, c.head_dim});
    return out;
}

std::vector<float> paged(const PagedKvCache& pool, const BlockTable& table, const ModelConfig& c,
                         const std::vector<float>& q, int64_t num_queries, int64_t num_keys) {
    std::vector<float> out(q.size(), NAN);
    paged_attention(q.data(), pool.keys(1), pool.values(1), table.blocks().data(),
                    pool.block_size(), out.data(),
                    {num_queries, num_keys, c.num_heads, c.num_kv_heads, c.head_dim});
    return out;
}

// Attention whose token j is read from pool row row_of(j): what a gather that
// computes the rows another way would give.
template <typename RowOf>
std::vector<float> attention_over_pool_rows(const PagedKvCache& pool, const ModelConfig& c,
                                            const std::vector<float>& q, int64_t num_queries,
                                            int64_t num_keys, RowOf row_of) {
    const int64_t kv = c.kv_dim();
    std::vector<float> k(size_t(num_keys * kv)), v(size_t(num_keys * kv));
    for (int64_t j = 0; j < num_keys; ++j) {
        std::copy_n(pool.keys(1) + row_of(j) * kv, kv, k.begin() + j * kv);
        std::copy_n(pool.values(1) + row_of(j) * kv, kv, v.begin() + j * kv);
    }
    return contiguous_attention(c, q, k, v, num_queries, num_keys);
}

TEST(PagedAttention, EqualsAttentionOverAContiguousCache) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<std::pair<int64_t, int64_t>> layouts = {{4, 4}, {6, 2}, {8, 1}, {9, 3}};
    for (auto [heads, kv_heads] : layouts) {
        for (int64_t block_size : {int64_t(1), int64_t(3), int64_t(16), random.integer(2, 40)}) {
            SCOPED_TRACE(testing::Message()
                         << heads << ":" << kv_heads << " heads, block size " << block_size);
            const ModelConfig c = tiny_config(heads, kv_heads);
            const int64_t num_keys = random.integer(1, 100);
            const int64_t num_queries = random.integer(1, num_keys);
            PagedKvCache pool(c, 2 * (num_keys / block_size + 2), block_size);
            BlockTable target(block_size), decoy(block_size);
            for (int64_t t = 0; t < num_keys; ++t) {  // interleaved: scattered blocks
                target.append_slot(pool.allocator());
                if (random.integer(0, 1) == 1) decoy.append_slot(pool.allocator());
            }
            const auto q = random.normal(size_t(num_queries * c.q_dim()));
            const auto k = random.normal(size_t(num_keys * c.kv_dim()));
            const auto v = random.normal(size_t(num_keys * c.kv_dim()));
            pool.write(1, target, 0, k.data(), v.data(), num_keys);
            const std::vector<float> got = paged(pool, target, c, q, num_queries, num_keys);
            const double error = test::max_relative_error(
                got, contiguous_attention(c, q, k, v, num_queries, num_keys));
            const auto& blocks = target.blocks();
            const bool unscaled_block =
                block_size > 1 &&
                test::max_relative_error(
                    got, attention_over_pool_rows(pool, c, q, num_queries, num_keys, [&](int64_t j) {
                        return int64_t(blocks[size_t(j / block_size)]) + j % block_size;
                    })) <= 1e-6;
            EXPECT_LE(error, 1e-6)
                << (unscaled_block
                        ? "token j was read from pool row block_table[j / block_size] + j % "
                          "block_size: the block id must be multiplied by block_size (a block "
                          "is block_size rows of the pool)"
                        : "paged attention differs from attention over the same keys and "
                          "values stored contiguously");
        }
    }
}

// The block table ends at an inaccessible page, with exactly the blocks the
// sequence's tokens fill: reading an entry past the last token's block stops
// this test with SIGSEGV.
TEST(PagedAttention, ReadsNoBlockTableEntryPastTheLastToken) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const ModelConfig c = tiny_config(4, 2);
    const int64_t block_size = 4, num_keys = 12;  // exactly 3 full blocks
    PagedKvCache pool(c, 8, block_size);
    BlockTable table(block_size);
    for (int64_t t = 0; t < num_keys; ++t) table.append_slot(pool.allocator());
    const auto k = random.normal(size_t(num_keys * c.kv_dim()));
    const auto v = random.normal(size_t(num_keys * c.kv_dim()));
    pool.write(1, table, 0, k.data(), v.data(), num_keys);
    test::GuardedArray<int32_t> guarded_table(table.blocks().size());
    std::copy(table.blocks().begin(), table.blocks().end(), guarded_table.data());
    const auto q = random.normal(size_t(2 * c.q_dim()));
    std::vector<float> out(q.size(), NAN);
    paged_attention(q.data(), pool.keys(1), pool.values(1), guarded_table.data(), block_size,
                    out.data(), {2, num_keys, c.num_heads, c.num_kv_heads, c.head_dim});
    EXPECT_LE(test::max_relative_error(out, contiguous_attention(c, q, k, v, 2, num_keys)), 1e-6);
}

TEST(PagedAttention, ForkedSequencesReadTheirOwnTokensAfterCopyOnWrite) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const ModelConfig c = tiny_config(4, 2);
    const int64_t block_size = 4, prompt = 6, kv = c.kv_dim();
    PagedKvCache pool(c, 16, block_size);
    BlockTable parent(block_size);
    auto k = random.normal(size_t((prompt + 1) * kv)), v = random.normal(size_t((prompt + 1) * kv));
    for (int64_t t = 0; t < prompt; ++t) parent.append_slot(pool.allocator());
    pool.write(1, parent, 0, k.data(), v.data(), prompt);

    // The child appends a different 7th token than the parent: its shared,
    // half-full last block must be copied first.
    BlockTable child = parent.fork(pool.allocator());
    auto child_k = k, child_v = v;
    const auto extra = random.normal(size_t(2 * kv));
    std::copy_n(extra.begin(), kv, child_k.begin() + prompt * kv);
    std::copy_n(extra.begin() + kv, kv, child_v.begin() + prompt * kv);
    const AppendResult r = child.append_slot(pool.allocator());
    ASSERT_TRUE(r.copy.has_value());
    pool.copy_block(*r.copy);
    pool.write(1, child, prompt, child_k.data() + prompt * kv, child_v.data() + prompt * kv, 1);
    parent.append_slot(pool.allocator());
    pool.write(1, parent, prompt, k.data() + prompt * kv, v.data() + prompt * kv, 1);

    const auto q = random.normal(size_t(c.q_dim()));
    EXPECT_LE(test::max_relative_error(paged(pool, parent, c, q, 1, prompt + 1),
                                       contiguous_attention(c, q, k, v, 1, prompt + 1)),
              1e-6);
    EXPECT_LE(test::max_relative_error(paged(pool, child, c, q, 1, prompt + 1),
                                       contiguous_attention(c, q, child_k, child_v, 1, prompt + 1)),
              1e-6);
}

TEST(PagedKvCache, IsSizedFromAMemoryBudget) {
    const ModelConfig c = tiny_config(4, 2);
    const int64_t block_bytes = PagedKvCache::block_bytes(c, 16);
    EXPECT_EQ(block_bytes, 2 * c.num_layers * 16 * c.kv_dim() * 4);
    const int64_t blocks = PagedKvCache::blocks_for_budget(c, 16, 10 * block_bytes + 5);
    EXPECT_EQ(blocks, 10);
    const PagedKvCache pool(c, blocks, 16);
    EXPECT_EQ(pool.allocated_bytes(), blocks * block_bytes);
    PagedKvCache pool_to_fill(c, blocks, 16);
    for (int64_t i = 0; i < blocks; ++i) pool_to_fill.allocator().allocate();
    EXPECT_FALSE(pool_to_fill.allocator().try_allocate().has_value());
}

}  // namespace
}  // namespace servelab
