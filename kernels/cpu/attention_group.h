// attention_group.h — the inner loops of attention over a cache, for one query token and one GQA
// group.
//
// Part of the kernels (Labs 3 and 4; chapter 11.3 and 11.4). Query token t
// attends to the first `visible_keys` cached rows (the causal mask), for
// every query head in `heads`: the heads that read one KV head (a GQA
// group, Lab 3). Each key and value row is fetched once and serves the
// whole group. The two cached attention kernels differ only in where row j
// comes from, so they pass it in:
//   attention_over_kv (attention_kv.cpp): row j of a contiguous cache,
//     dequantized if it is stored in int8/fp8/f16;
//   paged_attention (paged_attention.cpp): row j gathered through a block
//     table from a pool of blocks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/head_mapping.h"
#include "kernels/cpu/softmax.h"

namespace servelab {

// readers[g] = the query heads that read KV head g, in increasing order.
// Throws servelab::Error if the head mapping (a Lab 3 exercise) sends a head
// out of range.
// The same into `readers`, reusing its memory (the decode loop's version).
inline void query_heads_by_kv_head(const AttentionShape& s,
                                   std::vector<std::vector<int64_t>>& readers) {
    readers.resize(static_cast<size_t>(s.num_kv_heads));
    for (std::vector<int64_t>& heads : readers) heads.clear();
    for (int64_t h = 0; h < s.num_heads; ++h) {
        const int64_t g = kv_head_for_query_head(h, s.num_heads, s.num_kv_heads);
        if (g < 0 || g >= s.num_kv_heads) {
            throw Error("attention: the head mapping sent a query head to a KV head out of range");
        }
        readers[size_t(g)].push_back(h);
    }
}

inline std::vector<std::vector<int64_t>> query_heads_by_kv_head(const AttentionShape& s) {
    std::vector<std::vector<int64_t>> readers;
    query_heads_by_kv_head(s, readers);
    return readers;
}

// Whether this CPU runs attend_query_group's AVX-512 build (below).
inline bool cpu_runs_avx512_attention() {
    return simd_level() == SimdLevel::kAvx512;
}

// The loops of attend_query_group, written once. They are plain loops; the
// compiler vectorizes them to whatever the function they are inlined into is
// compiled for, which is what the two builds below choose.
template <typename KeyRow, typename ValueRow>
[[gnu::always_inline]] inline void attend_query_group_loops(
    const float* q_t, std::span<const int64_t> heads, int64_t head_dim, int64_t visible_keys,
    KeyRow key_row, ValueRow value_row, float* out_t, std::vector<float>& scores) {
    const float scale = 1.0f / std::sqrt(float(head_dim));
    scores.resize(heads.size() * size_t(visible_keys));
    for (int64_t j = 0; j < visible_keys; ++j) {
        const float* k_j = key_row(j);
        for (size_t i = 0; i < heads.size(); ++i) {
            const float* q_th = q_t + heads[i] * head_dim;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < head_dim; ++d) dot += q_th[d] * k_j[d];
            scores[i * size_t(visible_keys) + size_t(j)] = dot * scale;
        }
    }
    for (size_t i = 0; i < heads.size(); ++i) {
        softmax(scores.data() + i * size_t(visible_keys), visible_keys);
        float* out_th = out_t + heads[i] * head_dim;
        std::fill(out_th, out_th + head_dim, 0.0f);
    }
    for (int64_t j = 0; j < visible_keys; ++j) {
        const float* v_j = value_row(j);
        for (size_t i = 0; i < heads.size(); ++i) {
            const float weight = scores[i * size_t(visible_keys) + size_t(j)];
            float* out_th = out_t + heads[i] * head_dim;
#pragma omp simd
            for (int64_t d = 0; d < head_dim; ++d) out_th[d] += weight * v_j[d];
        }
    }
}

// The same loops compiled for AVX-512 (16 floats per instruction instead of
// the baseline build's 4): 64-wide heads become 4 FMAs per key and head.
template <typename KeyRow, typename ValueRow>
__attribute__((target("avx2,fma,avx512f,avx512vl,avx512dq,avx512bw"))) void
attend_query_group_avx512(const float* q_t, std::span<const int64_t> heads, int64_t head_dim,
                          int64_t visible_keys, KeyRow key_row, ValueRow value_row, float* out_t,
                          std::vector<float>& scores) {
    attend_query_group_loops(q_t, heads, head_dim, visible_keys, key_row, value_row, out_t, scores);
}

// q_t, out_t: this token's (num_heads, head_dim) rows of q and out.
// key_row(j), value_row(j): const float* to row j's head_dim numbers.
// scores: scratch, resized here (heads.size() × visible_keys).
template <typename KeyRow, typename ValueRow>
void attend_query_group(const float* q_t, std::span<const int64_t> heads, int64_t head_dim,
                        int64_t visible_keys, KeyRow key_row, ValueRow value_row, float* out_t,
                        std::vector<float>& scores) {
    if (cpu_runs_avx512_attention()) {
        return attend_query_group_avx512(q_t, heads, head_dim, visible_keys, key_row, value_row,
                                         out_t, scores);
    }
    attend_query_group_loops(q_t, heads, head_dim, visible_keys, key_row, value_row, out_t, scores);
}

}  // namespace servelab
