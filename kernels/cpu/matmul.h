// matmul.h — the projections: y = x · Wᵀ for every token of a step.
//
// CPU kernel (all labs). By far the most time of a forward pass is spent
// here: every weight matrix is read once per call. W is stored as ggml
// stores it, one output feature per row: W is (out_features, in_features).
//
// Two versions: `matmul_plain` is the formula as three loops, for reading and
// for checking the fast one; `matmul` computes the same sums with each weight
// row reused across a tile of tokens while it is in cache, parallel over
// output rows with OpenMP.
#pragma once

#include <cstdint>

namespace servelab {

// x: (num_tokens, in_features), w: (out_features, in_features),
// y: (num_tokens, out_features). y must not alias x or w.
void matmul_plain(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_features,
                  int64_t out_features);
void matmul(const float* x, const float* w, float* y, int64_t num_tokens, int64_t in_features,
            int64_t out_features);

}  // namespace servelab
