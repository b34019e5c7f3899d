// paged_attention.cpp — see paged_attention.h. Lab 4's exercise: the gather through the
// block table.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/head_mapping.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/softmax.h"
#include "reference/common/error.h"

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
    // readers[g]: the query heads that read KV head g (GQA groups them).
    std::vector<std::vector<int64_t>> readers(static_cast<size_t>(s.num_kv_heads));
    for (int64_t h = 0; h < s.num_heads; ++h) {
        const int64_t g = kv_head_for_query_head(h, s.num_heads, s.num_kv_heads);
        if (g < 0 || g >= s.num_kv_heads) {
            throw Error("attention: the head mapping sent a query head to a KV head out of range");
        }
        readers[size_t(g)].push_back(h);
    }

    // The loops of attention_over_kv (attention_kv.cpp): one work item per
    // (query token, KV head), so each gathered row serves its whole group.
    parallel_for(s.num_queries * s.num_kv_heads, [&](int64_t item) {
        const int64_t t = item / s.num_kv_heads;
        const int64_t g = item % s.num_kv_heads;
        const std::vector<int64_t>& heads = readers[size_t(g)];
        const int64_t visible_keys = first_query_position + t + 1;  // causal mask
        thread_local std::vector<float> scores;  // one row per reader, reused across calls
        scores.resize(heads.size() * size_t(visible_keys));

        for (int64_t j = 0; j < visible_keys; ++j) {
            const float* k_j = key_pool + pool_row[size_t(j)] * kv_stride + g * s.head_dim;
            for (size_t i = 0; i < heads.size(); ++i) {
                const float* q_th = q + t * q_stride + heads[i] * s.head_dim;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int64_t d = 0; d < s.head_dim; ++d) dot += q_th[d] * k_j[d];
                scores[i * size_t(visible_keys) + size_t(j)] = dot * scale;
            }
        }
        for (size_t i = 0; i < heads.size(); ++i) {
            softmax(scores.data() + i * size_t(visible_keys), visible_keys);
            float* out_th = out + t * q_stride + heads[i] * s.head_dim;
            std::fill(out_th, out_th + s.head_dim, 0.0f);
        }
        for (int64_t j = 0; j < visible_keys; ++j) {
            const float* v_j = value_pool + pool_row[size_t(j)] * kv_stride + g * s.head_dim;
            for (size_t i = 0; i < heads.size(); ++i) {
                const float weight = scores[i * size_t(visible_keys) + size_t(j)];
                float* out_th = out + t * q_stride + heads[i] * s.head_dim;
#pragma omp simd
                for (int64_t d = 0; d < s.head_dim; ++d) out_th[d] += weight * v_j[d];
            }
        }
    });
}

}  // namespace servelab
