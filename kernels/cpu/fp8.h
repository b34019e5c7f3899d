// fp8.h — FP8 E4M3 (the OCP "e4m3fn" format) encode/decode.
//
// Part of Lab 3 (chapter 11.3, KV cache quantization). One byte per value:
//
//     bit  7    6 5 4 3    2 1 0
//          S    E E E E    M M M        exponent bias 7
//
//   E = 0       subnormal: (-1)^S * M/8 * 2^-6   (smallest nonzero: 2^-9)
//   E = 1..15   normal:    (-1)^S * (1 + M/8) * 2^(E-7)
//   S.1111.111  NaN — the only special code. There are no infinities, which
//               frees S.1111.000..110 for finite values; the largest is ±448.
//
// KV caches use it because it halves the bytes of an FP16 cache (a quarter of
// FP32) while keeping a float's shape: relative error of at most 1/16 across
// ~18 binades. A per-head scale maps each head's largest |value| near 448, so
// the remaining range covers the small values instead of wasting it.
#pragma once

#include <cstdint>

namespace servelab {

inline constexpr float kFp8E4M3Max = 448.0f;

// Round to nearest, ties to even; values beyond ±448 (and ±inf) saturate to ±448; NaN → 0x7F.
uint8_t float_to_fp8_e4m3(float value);
float fp8_e4m3_to_float(uint8_t code);

}  // namespace servelab
