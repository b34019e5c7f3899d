// rope_kernels.h — rotary position embedding on the GPU, from a precomputed cos/sin table.
//
// Part of the CUDA backend (issue 7; the RoPE of chapter 11.2's layer). The
// same rotation as kernels/cpu/rope.h (adjacent pairs, GGUF's "normal"
// layout). The angles are computed once, on the host in double precision,
// into a table of max_positions × rope_dim/2 (cos, sin) pairs: at positions
// in the thousands an fp32 angle computed on the device would lose the low
// bits that decide cos and sin (vLLM keeps the same kind of cos/sin cache).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/rope.h"

namespace servelab::cuda {

// (cos, sin) of every pair's angle at every position < max_positions:
// table[(pos * rope_dim/2 + pair) * 2 + {0, 1}].
std::vector<float> rope_cos_sin_table(const RopeParams& params, int64_t max_positions);

// Rotates vecs (num_tokens, num_heads, head_dim), bf16, in place; token t is
// at positions[t] (< the table's max_positions; checked by the host caller).
void rope_bf16(__nv_bfloat16* vecs, const int32_t* positions, const float* cos_sin_table,
               int64_t num_tokens, int64_t num_heads, const RopeParams& params,
               cudaStream_t stream);

}  // namespace servelab::cuda
