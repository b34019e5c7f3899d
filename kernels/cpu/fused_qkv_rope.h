// fused_qkv_rope.h — RoPE applied in the Q/K/V projection's epilogue.
//
// CPU kernel (chapter 11.7, kernel fusion; docs/kernel_fusion.md). Unfused,
// the projection writes q and k, then rope_apply_rows reads both back,
// rotates and writes them again; and it recomputes cos and sin of every
// angle (a pow, a cos and a sin in double per pair) for every layer, though
// the angles depend only on the position. Fused:
//   - the angles are computed once per step into a RopeTable (T × rope_dim/2
//     cos and sin), shared by every layer and by q and k;
//   - the matmul runs one 16-row group of the repacked weights at a time
//     (kernels/cpu/quant_matmul_repacked.h), and each q or k group is rotated
//     right after it is computed, while its T × 16 outputs are still in L1/L2.
// A group holds 16 consecutive output features; RoPE rotates adjacent pairs
// (2i, 2i + 1) inside a head, so with an even head_dim no pair straddles two
// groups.
//
// Bit for bit the numbers of multiply_same_input then rope_apply_rows: the
// same angle formula in double, the same rotation in float, the same group
// kernel. Fast mode with repacked weights only (AVX-512 VNNI); the engine
// runs it only where kernels/cpu/rope.cpp is the reference version
// (reference/engine/fusion_plan.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/quant_matmul_fast.h"
#include "kernels/cpu/quant_matmul_repacked.h"
#include "kernels/cpu/rope.h"

namespace servelab {

// cos and sin of every rotated pair's angle at each of a step's positions.
struct RopeTable {
    int64_t num_tokens = 0;
    int64_t num_pairs = 0;   // rope_dim / 2
    std::vector<float> cos;  // (num_tokens, num_pairs)
    std::vector<float> sin;  // (num_tokens, num_pairs)
};

// Fills `table` for positions (num_tokens); buffers only grow.
void fill_rope_table(const int64_t* positions, int64_t num_tokens, const RopeParams& params,
                     RopeTable& table);

// Rotates output features [feature_begin, feature_end) of every token:
// y is (num_tokens, y_stride), each row num_heads × head_dim features.
// feature_begin and feature_end even.
void rope_apply_table(float* y, int64_t y_stride, int64_t num_tokens, int64_t feature_begin,
                      int64_t feature_end, const RopeParams& params, const RopeTable& table);

// q (T, wq.rows), k (T, wk.rows), v (T, wv.rows) = x · Wᵀ, with q and k
// rotated by `table` (T = x.num_tokens). One parallel region over the three
// matrices' groups laid end to end, as multiply_same_input.
void qkv_matmul_rope(const QuantizedActivations& x, const RepackedMatrix& wq,
                     const RepackedMatrix& wk, const RepackedMatrix& wv, float* q, float* k,
                     float* v, const RopeParams& params, const RopeTable& table);

}  // namespace servelab
