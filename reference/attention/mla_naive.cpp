// mla_naive.cpp — MLA by up-projecting the cache (see mla_attention.h).
//
// Lab 3 (chapter 11.3, MLA). The literal reading of the DeepSeek-V2
// equations, kept as the baseline the absorbed form must match.
#include <cmath>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/softmax.h"
#include "reference/attention/mla_attention.h"

namespace servelab {
namespace {

// The cached rows of `view` (one head each) as a dense fp32 matrix (num_tokens, head_dim).
std::vector<float> dequantize_all(const KvView& view, int64_t num_tokens) {
    std::vector<float> rows(size_t(num_tokens * view.head_dim));
    for (int64_t j = 0; j < num_tokens; ++j) {
        float* row = rows.data() + j * view.head_dim;
        const float* cached = kv_row(view, j, 0, row);
        if (cached != row) std::copy(cached, cached + view.head_dim, row);
    }
    return rows;
}

float dot(const float* a, const float* b, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

}  // namespace

void mla_attention_naive(const float* q_nope, const float* q_pe, const KvView& rope_keys,
                         const KvView& latents, const float* wkv_b, float* out, const MlaShape& s) {
    // Rebuild every cached token's per-head keys and values:
    // up[j] = (head 0: k_nope | v, head 1: k_nope | v, ...) = W_UKV · c_kv[j].
    const int64_t up_width = s.qk_nope_dim + s.v_head_dim;  // per head
    const std::vector<float> c_kv = dequantize_all(latents, s.num_keys);
    const std::vector<float> k_pe = dequantize_all(rope_keys, s.num_keys);
    std::vector<float> up(size_t(s.num_keys * s.num_heads * up_width));
    matmul(c_kv.data(), wkv_b, up.data(), s.num_keys, s.kv_lora_rank, s.num_heads * up_width);

    const int64_t first_query_position = s.num_keys - s.num_queries;
    const float scale = 1.0f / std::sqrt(float(s.qk_nope_dim + s.rope_dim));
#pragma omp parallel
    {
        std::vector<float> scores(size_t(s.num_keys));
#pragma omp for collapse(2) schedule(static)
        for (int64_t t = 0; t < s.num_queries; ++t) {
            for (int64_t h = 0; h < s.num_heads; ++h) {
                const float* qn = q_nope + (t * s.num_heads + h) * s.qk_nope_dim;
                const float* qr = q_pe + (t * s.num_heads + h) * s.rope_dim;
                const int64_t visible_keys = first_query_position + t + 1;
                for (int64_t j = 0; j < visible_keys; ++j) {
                    const float* k_nope = up.data() + (j * s.num_heads + h) * up_width;
                    const float* k_rope = k_pe.data() + j * s.rope_dim;
                    scores[size_t(j)] =
                        (dot(qn, k_nope, s.qk_nope_dim) + dot(qr, k_rope, s.rope_dim)) * scale;
                }
                softmax(scores.data(), visible_keys);
                float* out_th = out + (t * s.num_heads + h) * s.v_head_dim;
                for (int64_t d = 0; d < s.v_head_dim; ++d) out_th[d] = 0.0f;
                for (int64_t j = 0; j < visible_keys; ++j) {
                    const float* v = up.data() + (j * s.num_heads + h) * up_width + s.qk_nope_dim;
                    for (int64_t d = 0; d < s.v_head_dim; ++d)
                        out_th[d] += scores[size_t(j)] * v[d];
                }
            }
        }
    }
}

}  // namespace servelab
