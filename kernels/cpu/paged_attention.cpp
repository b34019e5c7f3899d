// paged_attention.cpp — see paged_attention.h. Lab 4's exercise: the gather through the
// block table.
#include "kernels/cpu/paged_attention.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/head_mapping.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/softmax.h"

namespace servelab {

void paged_attention(const float* q, const float* key_pool, const float* value_pool,
                     const int32_t* block_table, int64_t block_size, float* out,
                     const AttentionShape& s) {
    const int64_t q_stride = s.num_heads * s.head_dim;
    const int64_t kv_stride = s.num_kv_heads * s.head_dim;  // floats per pool row
    const int64_t first_query_position = s.num_keys - s.num_queries;
    const float scale = 1.0f / std::sqrt(float(s.head_dim));
    // Where each visible token's row is in the pool: the block table lookup,
    // done once per call rather than once per head.
    std::vector<int64_t> pool_row(static_cast<size_t>(s.num_keys));
    // BEGIN SOLUTION lab04
    // HINT: token j is in logical block j / block_size at offset j % block_size;
    // HINT: block_table[logical] is the physical block, which starts at row block · block_size
    for (int64_t j = 0; j < s.num_keys; ++j) {
        pool_row[size_t(j)] = int64_t(block_table[j / block_size]) * block_size + j % block_size;
    }
    // END SOLUTION
    std::vector<int64_t> kv_head_of(size_t(s.num_heads));
    for (int64_t h = 0; h < s.num_heads; ++h) {
        kv_head_of[size_t(h)] = kv_head_for_query_head(h, s.num_heads, s.num_kv_heads);
    }

    parallel_for(s.num_queries * s.num_heads, [&](int64_t item) {
        const int64_t t = item / s.num_heads;
        const int64_t h = item % s.num_heads;
        const int64_t kv_head = kv_head_of[size_t(h)];
        const int64_t visible_keys = first_query_position + t + 1;  // causal mask
        const float* q_th = q + t * q_stride + h * s.head_dim;
        std::vector<float> scores(static_cast<size_t>(visible_keys));
        for (int64_t j = 0; j < visible_keys; ++j) {
            const float* k_j = key_pool + pool_row[size_t(j)] * kv_stride + kv_head * s.head_dim;
            float dot = 0.0f;
            for (int64_t d = 0; d < s.head_dim; ++d) dot += q_th[d] * k_j[d];
            scores[size_t(j)] = dot * scale;
        }
        softmax(scores.data(), visible_keys);
        float* out_th = out + t * q_stride + h * s.head_dim;
        for (int64_t d = 0; d < s.head_dim; ++d) out_th[d] = 0.0f;
        for (int64_t j = 0; j < visible_keys; ++j) {
            const float* v_j = value_pool + pool_row[size_t(j)] * kv_stride + kv_head * s.head_dim;
            for (int64_t d = 0; d < s.head_dim; ++d) out_th[d] += scores[size_t(j)] * v_j[d];
        }
    });
}

}  // namespace servelab
