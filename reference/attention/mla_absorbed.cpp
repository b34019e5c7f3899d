// mla_absorbed.cpp — MLA directly over the latent cache (see mla_attention.h).
//
// Lab 3 (chapter 11.3, MLA). Lab 3's exercise: the absorbed form. Per query
// token t and head h:
//   q_latent = W_UK_hᵀ · q_nope          (kv_lora_rank): W_UK folded into the query
//   score_j  = (q_latent · c_kv_j + q_pe · k_pe_j) / sqrt(qk_nope_dim + rope_dim)
//   o_latent = Σ_j softmax(score)_j · c_kv_j   (kv_lora_rank): attention over latents
//   out      = W_UV_h · o_latent          (v_head_dim): W_UV folded into the output
// The cached latents are never up-projected. (DeepSeek-V2 §2.1.2 folds the
// matrices themselves, W_UKᵀ·W_UQ and W_O·W_UV; multiplying per query as here
// is the same algebra without materializing the larger products.)
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/softmax.h"
#include "reference/attention/mla_attention.h"

namespace servelab {

void mla_attention_absorbed(const float* q_nope, const float* q_pe, const KvView& rope_keys,
                            const KvView& latents, const float* wkv_b, float* out,
                            const MlaShape& s) {
    // BEGIN SOLUTION lab03
    // HINT: per head, wkv_b has qk_nope_dim rows of W_UK, then v_head_dim rows of W_UV,
    // HINT: each kv_lora_rank wide; read cached rows with kv_row(latents, j, 0, buf)
    // HINT: and kv_row(rope_keys, j, 0, buf); to parallelize, use parallel_for
    // HINT: (kernels/cpu/parallel_for.h), not a bare OpenMP loop
    const int64_t up_width = s.qk_nope_dim + s.v_head_dim;  // rows of wkv_b per head
    const int64_t d_c = s.kv_lora_rank;
    const int64_t first_query_position = s.num_keys - s.num_queries;
    const float scale = 1.0f / std::sqrt(float(s.qk_nope_dim + s.rope_dim));
    // One work item per (query token, head); parallel_for because kv_row may
    // run your int8 dequantization, and an exception must not escape OpenMP.
    parallel_for(s.num_queries * s.num_heads, [&](int64_t item) {
        const int64_t t = item / s.num_heads;
        const int64_t h = item % s.num_heads;
        const float* w_uk = wkv_b + h * up_width * d_c;  // (qk_nope_dim, d_c)
        const float* w_uv = w_uk + s.qk_nope_dim * d_c;  // (v_head_dim, d_c)
        const float* qn = q_nope + (t * s.num_heads + h) * s.qk_nope_dim;
        const float* qr = q_pe + (t * s.num_heads + h) * s.rope_dim;
        const int64_t visible_keys = first_query_position + t + 1;  // causal mask
        std::vector<float> q_latent(size_t(d_c), 0.0f), o_latent(size_t(d_c), 0.0f);
        std::vector<float> latent_buffer(static_cast<size_t>(d_c));
        std::vector<float> rope_buffer(static_cast<size_t>(s.rope_dim));
        std::vector<float> scores(static_cast<size_t>(visible_keys));

        for (int64_t n = 0; n < s.qk_nope_dim; ++n) {
            for (int64_t c = 0; c < d_c; ++c) q_latent[size_t(c)] += qn[n] * w_uk[n * d_c + c];
        }
        for (int64_t j = 0; j < visible_keys; ++j) {
            const float* c_kv = kv_row(latents, j, 0, latent_buffer.data());
            const float* k_pe = kv_row(rope_keys, j, 0, rope_buffer.data());
            float score = 0.0f;
            for (int64_t c = 0; c < d_c; ++c) score += q_latent[size_t(c)] * c_kv[c];
            for (int64_t r = 0; r < s.rope_dim; ++r) score += qr[r] * k_pe[r];
            scores[size_t(j)] = score * scale;
        }
        softmax(scores.data(), visible_keys);
        for (int64_t j = 0; j < visible_keys; ++j) {
            const float* c_kv = kv_row(latents, j, 0, latent_buffer.data());
            for (int64_t c = 0; c < d_c; ++c) o_latent[size_t(c)] += scores[size_t(j)] * c_kv[c];
        }
        float* out_th = out + (t * s.num_heads + h) * s.v_head_dim;
        for (int64_t d = 0; d < s.v_head_dim; ++d) {
            float sum = 0.0f;
            for (int64_t c = 0; c < d_c; ++c) sum += w_uv[d * d_c + c] * o_latent[size_t(c)];
            out_th[d] = sum;
        }
    });
    // END SOLUTION
}

}  // namespace servelab
