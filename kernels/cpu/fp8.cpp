// fp8.cpp — FP8 E4M3 encode/decode; see fp8.h for the bit layout.
//
// Part of Lab 3 (chapter 11.3, KV cache quantization). Written for reading,
// not for speed: decoding is a table lookup, encoding a few lines of exact
// arithmetic on powers of two.
#include "kernels/cpu/fp8.h"

#include <array>
#include <cmath>
#include <limits>

namespace servelab {
namespace {

constexpr uint8_t kSignBit = 0x80;
constexpr uint8_t kNanCode = 0x7F;
constexpr uint8_t kMaxCode = 0x7E;  // 0.1111.110 = 1.75 * 2^8 = 448
constexpr int kMantissaBits = 3;
constexpr int kExponentBias = 7;
constexpr int kMinNormalExponent = -6;  // biased exponent 1 - bias

// The value of one code, straight from the bit formula in fp8.h.
float decode_from_bits(uint8_t code) {
    const int exponent_field = (code >> kMantissaBits) & 0xF;
    const int mantissa = code & 0x7;
    if (exponent_field == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
    float magnitude;
    if (exponent_field == 0) {  // subnormal: no implicit leading 1
        magnitude = std::ldexp(float(mantissa), kMinNormalExponent - kMantissaBits);
    } else {
        magnitude = std::ldexp(float(8 + mantissa), exponent_field - kExponentBias - kMantissaBits);
    }
    return (code & kSignBit) ? -magnitude : magnitude;  // 0x80 gives -0.0
}

std::array<float, 256> build_decode_table() {
    std::array<float, 256> table{};
    for (int code = 0; code < 256; ++code) table[size_t(code)] = decode_from_bits(uint8_t(code));
    return table;
}

}  // namespace

float fp8_e4m3_to_float(uint8_t code) {
    // Built once, on first use; C++ makes the initialization of a function-local
    // static thread-safe, so concurrent first callers are fine.
    static const std::array<float, 256> table = build_decode_table();
    return table[code];
}

uint8_t float_to_fp8_e4m3(float value) {
    if (std::isnan(value)) return kNanCode;
    const uint8_t sign = std::signbit(value) ? kSignBit : 0;  // keeps -0.0 as 0x80
    const float magnitude = std::fabs(value);
    // Saturate instead of overflowing: the format has no infinity, and anything
    // at or past 448 (inf included) is closest to 448 anyway.
    if (magnitude >= kFp8E4M3Max) return sign | kMaxCode;

    // Within one binade [2^e, 2^(e+1)) the representable values are the
    // multiples of the step 2^(e-3) (3 mantissa bits). Below the smallest normal
    // 2^-6 the subnormals keep the step of that binade, 2^-9, so clamp e at -6.
    int exponent = kMinNormalExponent;
    if (magnitude >= std::ldexp(1.0f, kMinNormalExponent)) {
        int frexp_exponent;
        std::frexp(magnitude, &frexp_exponent);  // magnitude = f * 2^frexp_exponent, f in [0.5, 1)
        exponent = frexp_exponent - 1;           // so magnitude is in [2^exponent, 2^(exponent+1))
    }
    // Count steps. Scaling by a power of two is exact, and std::nearbyint rounds
    // to nearest, ties to even, under the default floating-point rounding mode.
    // The parity of `steps` is the parity of the mantissa, so ties land on even
    // mantissas as required.
    const float steps = std::nearbyint(std::ldexp(magnitude, kMantissaBits - exponent));

    // Codes are in value order, and each binade holds 8 codes, so code =
    // (codes below this binade) + steps, where steps is 0..8 for subnormals and
    // 8..16 for a normal binade. No special cases are needed where rounding
    // carries: steps = 8 in the subnormal range is the code of 2^-6 (0.0001.000),
    // and steps = 16 is the first code of the next binade. magnitude < 448
    // bounds the result by kMaxCode.
    const int code = (exponent - kMinNormalExponent) * 8 + int(steps);
    return sign | uint8_t(code);
}

}  // namespace servelab
