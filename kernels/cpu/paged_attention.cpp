// paged_attention.cpp — see paged_attention.h. Lab 4's exercise: the gather through the
// block table.
#include "kernels/cpu/paged_attention.h"

#include <vector>

#include "kernels/cpu/attention_group.h"
#include "kernels/cpu/parallel_for.h"

namespace servelab {

void map_pool_rows(const int32_t* block_table, int64_t block_size, int64_t num_keys,
                   std::vector<int64_t>& pool_row) {
    pool_row.resize(static_cast<size_t>(num_keys));
    // BEGIN SOLUTION lab04
    // HINT: token j is in logical block j / block_size at offset j % block_size;
    // HINT: physical block = block_table[logical]; its first row is block * block_size
    for (int64_t j = 0; j < num_keys; ++j) {
        pool_row[size_t(j)] = int64_t(block_table[j / block_size]) * block_size + j % block_size;
    }
    // END SOLUTION
}

void paged_attention(const float* q, const float* key_pool, const float* value_pool,
                     const int32_t* block_table, int64_t block_size, float* out,
                     const AttentionShape& s) {
    const int64_t q_stride = s.num_heads * s.head_dim;
    const int64_t kv_stride = s.num_kv_heads * s.head_dim;  // floats per pool row
    const int64_t first_query_position = s.num_keys - s.num_queries;
    // Where each visible token's row is in the pool: the block table lookup,
    // done once per call rather than once per head. The scratch is this
    // thread's and only grows, so decode steps allocate nothing; the
    // references below are what the worker threads read.
    thread_local std::vector<int64_t> pool_row_scratch;
    thread_local std::vector<std::vector<int64_t>> readers_scratch;
    std::vector<int64_t>& pool_row = pool_row_scratch;
    map_pool_rows(block_table, block_size, s.num_keys, pool_row);
    std::vector<std::vector<int64_t>>& readers = readers_scratch;
    query_heads_by_kv_head(s, readers);

    // attention_over_kv's loops (attention_group.h), with rows read through pool_row.
    parallel_for(s.num_queries * s.num_kv_heads, [&](int64_t item) {
        const int64_t t = item / s.num_kv_heads;
        const int64_t g = item % s.num_kv_heads;
        thread_local std::vector<float> scores;  // reused across calls
        attend_query_group(
            q + t * q_stride, readers[size_t(g)], s.head_dim, first_query_position + t + 1,
            [&](int64_t j) { return key_pool + pool_row[size_t(j)] * kv_stride + g * s.head_dim; },
            [&](int64_t j) {
                return value_pool + pool_row[size_t(j)] * kv_stride + g * s.head_dim;
            },
            out + t * q_stride, scores);
    });
}

}  // namespace servelab
