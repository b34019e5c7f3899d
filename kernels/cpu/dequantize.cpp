// dequantize.cpp — decode rows of F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q4_K/Q6_K tensors to floats.
//
// Part of the model loader (all labs) and the plain CPU kernels. One small
// function per block format, each following the byte layout of that format.
//
// Exactness: every product below is written as its own statement, in the same
// order as the reference decoders (the `gguf` Python package), so results are
// bit-identical to them. Splitting statements also keeps compilers that fuse
// a*b+c into one FMA (clang's default -ffp-contract=on) from changing rounding.
#include "kernels/cpu/dequantize.h"

#include <cstring>
#include <string>

#include "kernels/common/error.h"

namespace servelab {
namespace {

// Little-endian loads assembled byte by byte, so neither alignment nor the
// host's byte order matters.
uint16_t load_u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

uint32_t load_u32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

float bits_to_float(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

uint32_t float_to_bits(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits;
}

// ---- 32-value blocks -------------------------------------------------------

// Q8_0 (34 bytes): fp16 d, then 32 int8 codes q; x = q * d.
void dequantize_block_q8_0(const uint8_t* block, float* out) {
    const float d = load_fp16(block);
    const uint8_t* qs = block + 2;
    for (int i = 0; i < 32; ++i) {
        const float q = static_cast<float>(static_cast<int8_t>(qs[i]));
        out[i] = q * d;
    }
}

// Q4_0 (18 bytes): fp16 d, then 16 bytes. Byte j holds value j in its low
// nibble and value j+16 in its high nibble; codes are 0..15 centred on 8.
void dequantize_block_q4_0(const uint8_t* block, float* out) {
    const float d = load_fp16(block);
    const uint8_t* qs = block + 2;
    for (int j = 0; j < 16; ++j) {
        const int low_code = qs[j] & 0x0F;
        const int high_code = qs[j] >> 4;
        out[j] = d * static_cast<float>(low_code - 8);
        out[j + 16] = d * static_cast<float>(high_code - 8);
    }
}

// Q4_1 (20 bytes): fp16 d, fp16 m, then 16 bytes in Q4_0's nibble order; x = d * q + m.
void dequantize_block_q4_1(const uint8_t* block, float* out) {
    const float d = load_fp16(block);
    const float m = load_fp16(block + 2);
    const uint8_t* qs = block + 4;
    for (int j = 0; j < 16; ++j) {
        const float low_scaled = d * static_cast<float>(qs[j] & 0x0F);
        const float high_scaled = d * static_cast<float>(qs[j] >> 4);
        out[j] = low_scaled + m;
        out[j + 16] = high_scaled + m;
    }
}

// ---- 256-value "K" super-blocks --------------------------------------------

// Q4_K keeps 8 sub-blocks of 32 values, each with a 6-bit scale and a 6-bit
// min, packed into 12 bytes:
//   bytes 0..3 : low 6 bits = scale of sub-block 0..3, top 2 bits = bits 4..5 of scale 4..7
//   bytes 4..7 : low 6 bits = min   of sub-block 0..3, top 2 bits = bits 4..5 of min   4..7
//   bytes 8..11: low nibble = bits 0..3 of scale 4..7, high nibble = bits 0..3 of min 4..7
void unpack_q4_k_scale_min(const uint8_t* packed, int sub_block, int* scale, int* min) {
    if (sub_block < 4) {
        *scale = packed[sub_block] & 0x3F;
        *min = packed[sub_block + 4] & 0x3F;
    } else {
        const int i = sub_block - 4;
        *scale = (packed[i + 8] & 0x0F) | ((packed[i] >> 6) << 4);
        *min = (packed[i + 8] >> 4) | ((packed[i + 4] >> 6) << 4);
    }
}

// Q4_K (144 bytes): fp16 d, fp16 dmin, 12 bytes of scales/mins, 128 bytes of
// codes. Code bytes come in 4 chunks of 32: chunk c holds sub-block 2c in its
// low nibbles and sub-block 2c+1 in its high nibbles.
// x = (d * scale) * q - (dmin * min).
void dequantize_block_q4_k(const uint8_t* block, float* out) {
    const float d = load_fp16(block);
    const float dmin = load_fp16(block + 2);
    const uint8_t* packed_scales = block + 4;
    const uint8_t* qs = block + 16;
    for (int sub_block = 0; sub_block < 8; ++sub_block) {
        int scale = 0;
        int min = 0;
        unpack_q4_k_scale_min(packed_scales, sub_block, &scale, &min);
        const float sub_scale = d * static_cast<float>(scale);
        const float sub_offset = dmin * static_cast<float>(min);
        const uint8_t* chunk = qs + 32 * (sub_block / 2);
        const int nibble_shift = (sub_block % 2) * 4;
        for (int l = 0; l < 32; ++l) {
            const int code = (chunk[l] >> nibble_shift) & 0x0F;
            const float scaled = sub_scale * static_cast<float>(code);
            out[32 * sub_block + l] = scaled - sub_offset;
        }
    }
}

// Q6_K (210 bytes): ql[128] low 4 bits, qh[64] high 2 bits, int8 scales[16]
// (one per 16 values), fp16 d. Codes are 6-bit, centred on 32.
// The 256 values are two halves of 128. In half h, value r (0..127) takes
//   low 4 bits from ql[64h + r % 64], low nibble if r < 64 else high nibble,
//   high 2 bits from qh[32h + r % 32], bits 2*(r / 32) and up.
// x = (d * scales[i / 16]) * (q - 32).
void dequantize_block_q6_k(const uint8_t* block, float* out) {
    const uint8_t* ql = block;
    const uint8_t* qh = block + 128;
    const uint8_t* scales = block + 192;
    const float d = load_fp16(block + 208);
    for (int i = 0; i < 256; ++i) {
        const int half = i / 128;
        const int r = i % 128;
        const int low_bits = (ql[64 * half + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int high_bits = (qh[32 * half + r % 32] >> (2 * (r / 32))) & 0x03;
        const int code = (low_bits | (high_bits << 4)) - 32;
        const float sub_scale = d * static_cast<float>(static_cast<int8_t>(scales[i / 16]));
        out[i] = sub_scale * static_cast<float>(code);
    }
}

}  // namespace

// ---- scalar conversions ----------------------------------------------------

// fp16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
float fp16_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1F;
    const uint32_t mantissa = h & 0x3FF;
    if (exponent == 0) {
        // Zero or subnormal: mantissa * 2^-24, exact in float.
        const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 0x1F) {
        // Inf or NaN: keep the payload bits.
        return bits_to_float(sign | 0x7F800000u | (mantissa << 13));
    }
    // Normal: re-bias the exponent from 15 to 127 (+112) and widen the mantissa.
    return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// bf16 keeps the top 16 bits of a float32, rounded to nearest even.
uint16_t float_to_bf16(float f) {
    const uint32_t bits = float_to_bits(f);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
        return static_cast<uint16_t>((bits >> 16) | 0x0040);  // NaN: keep it a quiet NaN
    }
    const uint32_t lsb_of_result = (bits >> 16) & 1;
    // Adding 0x7FFF (+1 when the kept part is odd) carries into bit 16
    // exactly when the dropped half is above halfway, or at halfway and odd.
    return static_cast<uint16_t>((static_cast<uint64_t>(bits) + 0x7FFF + lsb_of_result) >> 16);
}

uint16_t float_to_fp16(float f) {
    const uint32_t bits = float_to_bits(f);
    const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
    const uint32_t magnitude = bits & 0x7FFFFFFFu;

    if (magnitude > 0x7F800000u) return sign | 0x7E00;  // NaN -> quiet NaN
    // 65520 is halfway between the largest half (65504) and 65536; ties go to
    // the even neighbour, 65536, which is out of range: so >= 65520 is inf.
    if (magnitude >= 0x477FF000u) return sign | 0x7C00;

    if (magnitude >= 0x38800000u) {
        // Normal half (>= 2^-14): re-bias the exponent (-112) and drop 13
        // mantissa bits, rounding to nearest even. A carry out of the
        // mantissa correctly bumps the exponent.
        uint32_t half = (magnitude - 0x38000000u) >> 13;
        const uint32_t dropped = magnitude & 0x1FFF;
        if (dropped > 0x1000 || (dropped == 0x1000 && (half & 1))) ++half;
        return static_cast<uint16_t>(sign | half);
    }

    // Subnormal half: the result counts units of 2^-24. At or below 2^-25
    // (half a unit, tie to even 0) everything rounds to zero.
    if (magnitude <= 0x33000000u) return sign;
    const uint32_t exponent = magnitude >> 23;  // 102..112 here
    const uint32_t full_mantissa = (magnitude & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t half = full_mantissa >> shift;
    const uint32_t dropped = full_mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (dropped > halfway || (dropped == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
}

// bf16 is the top half of a float32.
float bf16_to_float(uint16_t h) {
    return bits_to_float(static_cast<uint32_t>(h) << 16);
}

// ---- rows --------------------------------------------------------------------

bool row_is_whole_blocks(GgmlType type, int64_t n) {
    return n >= 0 && n % ggml_type_traits(type).block_elems == 0;
}

int64_t row_size_bytes(GgmlType type, int64_t n) {
    const GgmlTypeTraits traits = ggml_type_traits(type);
    return n / traits.block_elems * traits.block_bytes;
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
    const GgmlTypeTraits traits = ggml_type_traits(type);
    if (!row_is_whole_blocks(type, n)) {
        throw Error("dequantize_row: " + std::to_string(n) + " values is not a whole number of " +
                    std::string(traits.name) + " blocks of " + std::to_string(traits.block_elems));
    }
    const auto* bytes = static_cast<const uint8_t*>(src);
    const int64_t num_blocks = n / traits.block_elems;
    for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = bytes + b * traits.block_bytes;
        float* out = dst + b * traits.block_elems;
        switch (type) {
            case GgmlType::kF32:
                *out = bits_to_float(load_u32(block));
                break;
            case GgmlType::kF16:
                *out = fp16_to_float(load_u16(block));
                break;
            case GgmlType::kBF16:
                *out = bf16_to_float(load_u16(block));
                break;
            case GgmlType::kQ8_0:
                dequantize_block_q8_0(block, out);
                break;
            case GgmlType::kQ4_0:
                dequantize_block_q4_0(block, out);
                break;
            case GgmlType::kQ4_1:
                dequantize_block_q4_1(block, out);
                break;
            case GgmlType::kQ4_K:
                dequantize_block_q4_k(block, out);
                break;
            case GgmlType::kQ6_K:
                dequantize_block_q6_k(block, out);
                break;
        }
    }
}

}  // namespace servelab
