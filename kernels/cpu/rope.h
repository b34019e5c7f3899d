// rope.h — rotary position embedding (Su et al., 2021, "RoFormer").
//
// Plain CPU kernel (all labs). GGUF llama models use the "normal" layout:
// within each head, ADJACENT pairs (x[2i], x[2i+1]) are rotated by the angle
//   theta_i(pos) = pos * base^(-2i / rope_dim),   i < rope_dim / 2.
// (The GGUF converter permutes the Q/K weights so that this layout matches
// the "rotate halves" layout of the original checkpoints.) Dimensions at and
// past rope_dim in a head are left unrotated.
#pragma once

#include <cstdint>

namespace servelab {

struct RopeParams {
    int64_t head_dim = 0;
    int64_t rope_dim = 0;  // rotated dimensions per head, even, <= head_dim
    float freq_base = 10000.0f;
};

// Rotate one token's heads in place. vec: (num_heads, head_dim).
void rope_apply(float* vec, int64_t num_heads, int64_t position, const RopeParams& params);

// Rotate `num_tokens` tokens. vecs: (num_tokens, num_heads, head_dim),
// positions: (num_tokens).
void rope_apply_rows(float* vecs, const int64_t* positions, int64_t num_tokens, int64_t num_heads,
                     const RopeParams& params);

}  // namespace servelab
