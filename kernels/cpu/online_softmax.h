// online_softmax.h — softmax one tile of keys at a time, and the exact merge of two partial
// softmaxes: the two identities FlashAttention rests on.
//
// Part of the kernels (Lab 9, FlashAttention; chapter 11.7). Attention's
// output for one query row is o = Σ_j p_j·v_j / Σ_j p_j with p_j = exp(s_j − m)
// for any constant m; m = max_j s_j keeps every exp(·) <= 1, so nothing
// overflows. The online softmax does not know the max in advance: it keeps
// the max m of the keys seen so far, the sum l = Σ exp(s_j − m) and the
// unnormalized output o = Σ exp(s_j − m)·v_j. When a new tile raises the max
// to m', every term already summed was taken against the old max and is
// exp(m − m') too large, the same factor for all of them, so
//   l ← l·exp(m − m') + Σ_tile exp(s_j − m'),   o ← o·exp(m − m') + Σ_tile exp(s_j − m')·v_j
// is exact, not an approximation (Milakov & Gimelshein 2018; Dao et al.,
// FlashAttention, 2022). The same identity merges two partials (m₁, l₁, o₁)
// and (m₂, l₂, o₂) over disjoint key ranges: with M = max(m₁, m₂),
//   l = l₁·exp(m₁ − M) + l₂·exp(m₂ − M),   o = o₁·exp(m₁ − M) + o₂·exp(m₂ − M)
// which is how flash-decoding joins the key ranges its threads computed.
#pragma once

#include <cstdint>

namespace servelab {

// Folds one tile of scores into one row's softmax state (max, sum, out):
// on return scores[j] holds the tile's weight exp(s_j − max_new), `out` (head_dim
// floats) has been rescaled to the new max, and `sum` includes the tile. The
// caller then adds Σ_j scores[j]·v_j to `out` (tile_accumulate). A score of
// −inf is a masked key: weight 0. A tile of nothing but −inf leaves the state
// as it was and gives all-zero weights (exp(−inf − (−inf)) would be NaN).
void online_softmax_update(float* scores, int64_t num_scores, float& max, float& sum, float* out,
                           int64_t head_dim);

// Folds a partial softmax (part_max, part_sum, part_out) over other keys
// into the running one (max, sum, out). A partial that saw no key
// (part_max = −inf) changes nothing.
void merge_softmax_partial(float& max, float& sum, float* out, float part_max, float part_sum,
                           const float* part_out, int64_t head_dim);

}  // namespace servelab
