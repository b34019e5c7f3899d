// dequantize.h — turn one row of a quantized ggml tensor into floats.
//
// Part of the model loader (all labs) and the plain CPU kernels. Each ggml
// type stores a row as consecutive blocks (see GgmlTypeTraits); these
// functions decode blocks one at a time, written for reading, not for speed.
#pragma once

#include <cstdint>

#include "kernels/cpu/ggml_types.h"

namespace servelab {

// Bytes taken by a row of `n` values of `type`. `n` must be a multiple of the
// block size; callers check that with row_is_whole_blocks first.
int64_t row_size_bytes(GgmlType type, int64_t n);
bool row_is_whole_blocks(GgmlType type, int64_t n);

// Decode `n` values (a multiple of the block size) from `src` into `dst`.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Scalar conversions used by the block formats.
float fp16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);  // round to nearest even
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);  // round to nearest even

// The fp16 stored at p (a block's d or m, little-endian, any alignment) as a float.
inline float load_fp16(const uint8_t* p) {
    return fp16_to_float(uint16_t(p[0] | (p[1] << 8)));
}

}  // namespace servelab
