// attention_kv.cpp — see attention_kv.h.
#include "kernels/cpu/attention_kv.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/head_mapping.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/softmax.h"
#include "reference/common/error.h"

namespace servelab {
namespace {

// readers[g] = the query heads that read KV head g, in increasing order.
std::vector<std::vector<int64_t>> query_heads_by_kv_head(const AttentionShape& s) {
    std::vector<std::vector<int64_t>> readers(size_t(s.num_kv_heads));
    for (int64_t h = 0; h < s.num_heads; ++h) {
        const int64_t g = kv_head_for_query_head(h, s.num_heads, s.num_kv_heads);
        if (g < 0 || g >= s.num_kv_heads) {
            throw Error("attention: the head mapping sent a query head to a KV head out of range");
        }
        readers[size_t(g)].push_back(h);
    }
    return readers;
}

}  // namespace

void attention_over_kv(const float* q, const KvView& keys, const KvView& values, float* out,
                       const AttentionShape& s) {
    if (keys.num_heads != s.num_kv_heads || values.num_heads != s.num_kv_heads ||
        keys.head_dim != s.head_dim || values.head_dim != s.head_dim) {
        throw Error("attention: the KV views do not match the attention shape");
    }
    const auto readers = query_heads_by_kv_head(s);

    const int64_t q_stride = s.num_heads * s.head_dim;
    const int64_t first_query_position = s.num_keys - s.num_queries;
    const float scale = 1.0f / std::sqrt(float(s.head_dim));

    // One work item per (query token, KV head); parallel_for because kv_row
    // may run a student's dequantization, which may throw.
    parallel_for(s.num_queries * s.num_kv_heads, [&](int64_t item) {
        const int64_t t = item / s.num_kv_heads;
        const int64_t g = item % s.num_kv_heads;
        const std::vector<int64_t>& heads = readers[size_t(g)];
        const int64_t visible_keys = first_query_position + t + 1;  // causal mask
        // Per-thread buffers, reused across calls: no allocation per decode step.
        thread_local std::vector<float> row_buffer, scores;
        row_buffer.resize(size_t(s.head_dim));               // a dequantized row
        scores.resize(heads.size() * size_t(visible_keys));  // one row per reader

        for (int64_t j = 0; j < visible_keys; ++j) {
            const float* k_j = kv_row(keys, j, g, row_buffer.data());
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
            const float* v_j = kv_row(values, j, g, row_buffer.data());
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
