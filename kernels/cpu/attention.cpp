// attention.cpp — see attention.h.
#include "kernels/cpu/attention.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/head_mapping.h"
#include "kernels/cpu/softmax.h"

namespace servelab {

void attention_causal(const float* q, const float* k, const float* v, float* out,
                      const AttentionShape& s) {
    // BEGIN SOLUTION lab01
    // HINT: query head h reads KV head kv_head_for_query_head(h, ...) (head_mapping.h)
    // HINT: query t is at position num_keys - num_queries + t; it sees keys up to there
    const int64_t q_stride = s.num_heads * s.head_dim;      // floats per query token
    const int64_t kv_stride = s.num_kv_heads * s.head_dim;  // floats per key token
    const int64_t first_query_position = s.num_keys - s.num_queries;
    const float scale = 1.0f / std::sqrt(float(s.head_dim));
    std::vector<int64_t> kv_head_of(size_t(s.num_heads));  // outside the parallel region: may throw
    for (int64_t h = 0; h < s.num_heads; ++h) {
        kv_head_of[size_t(h)] = kv_head_for_query_head(h, s.num_heads, s.num_kv_heads);
    }

#pragma omp parallel
    {
        std::vector<float> scores(size_t(s.num_keys));  // one buffer per thread
#pragma omp for collapse(2) schedule(static)
        for (int64_t t = 0; t < s.num_queries; ++t) {
            for (int64_t h = 0; h < s.num_heads; ++h) {
                const int64_t kv_head = kv_head_of[size_t(h)];
                const int64_t visible_keys = first_query_position + t + 1;  // causal mask
                const float* q_th = q + t * q_stride + h * s.head_dim;

                for (int64_t j = 0; j < visible_keys; ++j) {
                    const float* k_j = k + j * kv_stride + kv_head * s.head_dim;
                    float dot = 0.0f;
                    for (int64_t d = 0; d < s.head_dim; ++d) dot += q_th[d] * k_j[d];
                    scores[size_t(j)] = dot * scale;
                }
                softmax(scores.data(), visible_keys);

                float* out_th = out + t * q_stride + h * s.head_dim;
                for (int64_t d = 0; d < s.head_dim; ++d) out_th[d] = 0.0f;
                for (int64_t j = 0; j < visible_keys; ++j) {
                    const float* v_j = v + j * kv_stride + kv_head * s.head_dim;
                    const float weight = scores[size_t(j)];
                    for (int64_t d = 0; d < s.head_dim; ++d) out_th[d] += weight * v_j[d];
                }
            }
        }
    }
    // END SOLUTION
}

}  // namespace servelab
