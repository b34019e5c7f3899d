// paged_flash_attention.cpp — see paged_flash_attention.h.
#include "kernels/cpu/paged_flash_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/attention_group.h"
#include "kernels/cpu/flash_decoding.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/parallel_for.h"

namespace servelab {
namespace {

// One (query tile, KV head)'s rows: the queries scaled, their causal limits,
// and room for their outputs.
struct TileRows {
    std::vector<float> q;          // num_rows × head_dim
    std::vector<int64_t> visible;  // num_rows
    std::vector<float> out;        // num_rows × head_dim
};

// Everything one call shares: the shape, the pool's layout, the heads.
struct Layout {
    const AttentionShape& shape;
    const float* q;
    const float* key_pool;
    const float* value_pool;
    const std::vector<int64_t>& pool_row;
    const std::vector<std::vector<int64_t>>& readers;  // the query heads of each KV head
    float* out;
};

// Queries [first, first + count) of KV head g's group, row (token i, head h)
// at i · group size + h.
AttentionGroup lay_out_rows(const Layout& l, int64_t first, int64_t count, int64_t g,
                            TileRows& tile) {
    const AttentionShape& s = l.shape;
    const std::vector<int64_t>& heads = l.readers[size_t(g)];
    const int64_t group_size = int64_t(heads.size());
    const int64_t num_rows = count * group_size;
    const float scale = 1.0f / std::sqrt(float(s.head_dim));
    tile.q.resize(size_t(num_rows * s.head_dim));
    tile.visible.resize(size_t(num_rows));
    tile.out.resize(size_t(num_rows * s.head_dim));
    for (int64_t i = 0; i < count; ++i) {
        const int64_t t = first + i;
        for (int64_t h = 0; h < group_size; ++h) {
            const int64_t row = i * group_size + h;
            const float* q_th = l.q + (t * s.num_heads + heads[size_t(h)]) * s.head_dim;
            for (int64_t d = 0; d < s.head_dim; ++d) {
                tile.q[size_t(row * s.head_dim + d)] = q_th[d] * scale;
            }
            tile.visible[size_t(row)] = s.num_keys - s.num_queries + t + 1;
        }
    }
    const KvRows kv{l.key_pool + g * s.head_dim,
                    l.value_pool + g * s.head_dim,
                    l.pool_row.data(),
                    s.num_kv_heads * s.head_dim,
                    s.num_keys,
                    s.head_dim};
    return AttentionGroup{{tile.q.data(), tile.visible.data(), num_rows}, kv, tile.out.data()};
}

// The rows' outputs back to out's (token, head, head_dim) layout.
void scatter_rows(const Layout& l, int64_t first, int64_t count, int64_t g, const TileRows& tile) {
    const AttentionShape& s = l.shape;
    const std::vector<int64_t>& heads = l.readers[size_t(g)];
    const int64_t group_size = int64_t(heads.size());
    for (int64_t i = 0; i < count; ++i) {
        for (int64_t h = 0; h < group_size; ++h) {
            const float* row = tile.out.data() + (i * group_size + h) * s.head_dim;
            std::copy(row, row + s.head_dim,
                      l.out + ((first + i) * s.num_heads + heads[size_t(h)]) * s.head_dim);
        }
    }
}

}  // namespace

void paged_flash_attention(const float* q, const float* key_pool, const float* value_pool,
                           const int32_t* block_table, int64_t block_size, float* out,
                           const AttentionShape& s, int64_t decode_keys_per_range) {
    if (s.num_queries < 1 || s.num_keys < s.num_queries || s.num_kv_heads < 1 ||
        s.num_heads < s.num_kv_heads || s.head_dim < 1) {
        throw Error("paged_flash_attention: a malformed attention shape");
    }
    // This thread's scratch, reused across calls (decode allocates nothing);
    // the worker threads read it through the references.
    thread_local std::vector<int64_t> pool_row_scratch;
    thread_local std::vector<std::vector<int64_t>> readers_scratch;
    map_pool_rows(block_table, block_size, s.num_keys, pool_row_scratch);
    query_heads_by_kv_head(s, readers_scratch);
    const Layout layout{s, q, key_pool, value_pool, pool_row_scratch, readers_scratch, out};

    const int64_t num_tiles = (s.num_queries + kQueriesPerTile - 1) / kQueriesPerTile;
    if (num_tiles == 1) {
        thread_local std::vector<TileRows> tiles_scratch;
        thread_local std::vector<AttentionGroup> groups_scratch;
        tiles_scratch.resize(size_t(s.num_kv_heads));
        groups_scratch.clear();
        for (int64_t g = 0; g < s.num_kv_heads; ++g) {
            groups_scratch.push_back(
                lay_out_rows(layout, 0, s.num_queries, g, tiles_scratch[size_t(g)]));
        }
        flash_decoding(groups_scratch, decode_keys_per_range);
        for (int64_t g = 0; g < s.num_kv_heads; ++g) {
            scatter_rows(layout, 0, s.num_queries, g, tiles_scratch[size_t(g)]);
        }
        return;
    }
    parallel_for(num_tiles * s.num_kv_heads, [&](int64_t item) {
        const int64_t first = (item / s.num_kv_heads) * kQueriesPerTile;
        const int64_t count = std::min(kQueriesPerTile, s.num_queries - first);
        const int64_t g = item % s.num_kv_heads;
        thread_local TileRows tile;  // this worker's, reused across calls
        flash_attention_prefill(lay_out_rows(layout, first, count, g, tile));
        scatter_rows(layout, first, count, g, tile);
    });
}

}  // namespace servelab
