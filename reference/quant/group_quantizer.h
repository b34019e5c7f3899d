// group_quantizer.h — round-to-nearest (RTN) quantization of weights in groups.
//
// Part of Lab 10, weight quantization (chapter 11.7: GPTQ and AWQ; 11.8: the
// cost side of the latency–throughput–cost triangle). Every method of the lab
// ends here: a run of `group_size` consecutive weights of one row (one output
// feature, consecutive input channels) shares one scale, and each weight is
// stored as a small integer code. RTN is this and nothing else; AWQ rescales
// the columns before it (awq_search.h), GPTQ changes the weights not yet
// quantized to absorb the error of those that were (gptq_block.h).
//
// The grids are the ones GGUF stores, so what the lab measures is what the
// written file holds:
//   symmetric, b bits:  d = m / −2^(b−1), m the weight of largest magnitude
//                       (the first of equals, as llama.cpp's quantizers pick),
//                       code q ∈ [−2^(b−1), 2^(b−1) − 1], value = q·d
//                       (Q4_0 at b = 4; Q8_0 holds the b = 8 codes exactly)
//   asymmetric, b bits: d = (max − min) / (2^b − 1), offset = min,
//                       code q ∈ [0, 2^b − 1], value = q·d + min   (Q4_1 at b = 4)
// The scale and the offset are rounded to fp16 before any code is chosen,
// because fp16 is what a block stores: the codes are then the nearest for
// the numbers the file really holds. (gguf_writer.h's quantize_row, which
// makes the test models, follows llama.cpp's reference quantizers instead:
// codes chosen against the unrounded scale, blocks of 32 only.)
#pragma once

#include <cstdint>

namespace servelab {

// How one matrix is quantized.
struct QuantScheme {
    int bits = 4;             // 2..8
    bool symmetric = false;   // true: codes around 0 (Q4_0, Q8_0); false: min-offset (Q4_1)
    int64_t group_size = 32;  // consecutive weights of a row sharing one scale
    // A row of `cols` weights has ceil(cols / group_size) groups; the last
    // one is shorter when group_size does not divide cols (576 = 4 · 128 + 64).
    int64_t num_groups(int64_t cols) const { return (cols + group_size - 1) / group_size; }
    // The weights of the group that starts at column `first`.
    int64_t group_length(int64_t first, int64_t cols) const {
        return first + group_size <= cols ? group_size : cols - first;
    }
    int max_code() const { return symmetric ? (1 << (bits - 1)) - 1 : (1 << bits) - 1; }
    int min_code() const { return symmetric ? -(1 << (bits - 1)) : 0; }
};

// The shared numbers of one group: value = code · scale + offset.
struct GroupParams {
    float scale = 0.0f;   // fp16-representable
    float offset = 0.0f;  // fp16-representable; 0 for symmetric schemes
};

// The parameters of the group `weights[0 .. count)` under `scheme`.
GroupParams fit_group(const float* weights, int64_t count, const QuantScheme& scheme);
// The code nearest to `weight` on the group's grid (clamped to the scheme's range).
int quantize_weight(float weight, const GroupParams& params, const QuantScheme& scheme);
// The value a code stands for.
inline float dequantize_code(int code, const GroupParams& params) {
    return float(code) * params.scale + params.offset;
}

// RTN of one row of `cols` weights: `out` gets the values the quantized
// row stands for, `params` (num_groups(cols) entries, may be null) each
// group's parameters. out may alias weights.
void rtn_quantize_row(const float* weights, float* out, GroupParams* params, int64_t cols,
                      const QuantScheme& scheme);

// RTN of a (rows, cols) row-major matrix: rtn_quantize_row on every row, in parallel.
void rtn_quantize_matrix(const float* weights, float* out, GroupParams* params, int64_t rows,
                         int64_t cols, const QuantScheme& scheme);

// Bits each weight costs with its group's share of the scale and offset
// (16 bits each): b + 16/g symmetric, b + 32/g asymmetric.
double bits_per_weight(const QuantScheme& scheme);

}  // namespace servelab
