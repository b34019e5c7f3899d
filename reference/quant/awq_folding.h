// awq_folding.h — where AWQ's division by the scales goes, so that it costs nothing.
//
// Part of Lab 10, weight quantization (chapter 11.7, AWQ). AWQ multiplies
// the columns of a projection W by s (awq_search.h) and must divide its
// input x by s. No extra op is needed: every input of a llama layer comes
// out of an op that is linear per channel, and that op's weights absorb 1/s:
//   q, k, v read rmsnorm(x)·g      → g_j /= s_j       (the attention norm)
//   gate, up read rmsnorm(x)·g     → g_j /= s_j       (the MLP norm)
//   down reads silu(gate)·up       → row j of w_up /= s_j
//   o reads Σ_t p_t · v_t per head → row j of w_v /= s_j
// For o under grouped-query attention several query heads read the same
// value head, so the value rows can take only one scale per channel of a
// KV head: o's scales are tied across the heads of a group
// (tie_scales_to_kv_heads), and its search runs with them tied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace servelab {

// columns j of w (rows, cols) *= scales[j]
void scale_columns(std::vector<float>& w, int64_t rows, int64_t cols, const float* scales);
// row r of w (rows, cols) /= scales[r]
void divide_rows(std::vector<float>& w, int64_t rows, int64_t cols, const float* scales);
// values[j] /= scales[j]
void divide_elements(std::vector<float>& values, const float* scales);

// mean |x| over the (num_heads · head_dim) inputs of o, averaged over the
// query heads of each KV head and written back to all of them, so that
// scales computed from it are tied across each group.
std::vector<float> tie_scales_to_kv_heads(const std::vector<float>& per_query_head,
                                          int64_t num_heads, int64_t num_kv_heads,
                                          int64_t head_dim);
// The (num_kv_heads · head_dim) scales for the rows of w_v, from tied o scales.
std::vector<float> kv_head_scales(const std::vector<float>& tied, int64_t num_heads,
                                  int64_t num_kv_heads, int64_t head_dim);

}  // namespace servelab
