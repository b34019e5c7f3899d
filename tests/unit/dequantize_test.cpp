// dequantize_test.cpp — block decoders and quantize_row, by hand and against the gguf package.
//
// Part of the model loader tests (all labs). Three kinds of checks:
//   1. hand-built blocks whose decoded values are worked out in the comments;
//   2. golden files made by tools/goldens/make_dequant_goldens.py with the official
//      `gguf` Python package, which servelab must match bit for bit (both
//      decode in float32 with the same operation order, so no tolerance is
//      needed);
//   3. quantize -> dequantize round trips on random data within each format's
//      error bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"
#include "reference/model/gguf_writer.h"

#ifndef SERVELAB_SOURCE_DIR
#define SERVELAB_SOURCE_DIR "."
#endif

namespace servelab {
namespace {

// fp16 bit patterns used below.
constexpr uint16_t kHalfOne = 0x3C00;       // 1.0
constexpr uint16_t kHalfHalf = 0x3800;      // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;   // 0.25
constexpr uint16_t kHalfMinusOne = 0xBC00;  // -1.0

void put_u16(std::vector<uint8_t>& block, size_t offset, uint16_t value) {
    block[offset] = static_cast<uint8_t>(value);
    block[offset + 1] = static_cast<uint8_t>(value >> 8);
}

std::vector<float> decode(GgmlType type, const std::vector<uint8_t>& raw, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(type, raw.data(), out.data(), n);
    return out;
}

// ---- sizes ---------------------------------------------------------------------

TEST(Dequantize, RowSizes) {
    EXPECT_EQ(row_size_bytes(GgmlType::kF32, 10), 40);
    EXPECT_EQ(row_size_bytes(GgmlType::kF16, 10), 20);
    EXPECT_EQ(row_size_bytes(GgmlType::kBF16, 10), 20);
    EXPECT_EQ(row_size_bytes(GgmlType::kQ8_0, 64), 68);
    EXPECT_EQ(row_size_bytes(GgmlType::kQ4_0, 64), 36);
    EXPECT_EQ(row_size_bytes(GgmlType::kQ4_1, 64), 40);
    EXPECT_EQ(row_size_bytes(GgmlType::kQ4_K, 512), 288);
    EXPECT_EQ(row_size_bytes(GgmlType::kQ6_K, 512), 420);
    EXPECT_TRUE(row_is_whole_blocks(GgmlType::kQ4_0, 576));
    EXPECT_FALSE(row_is_whole_blocks(GgmlType::kQ4_0, 33));
    EXPECT_FALSE(row_is_whole_blocks(GgmlType::kQ4_K, 576));  // 576 = 2.25 × 256
    EXPECT_TRUE(row_is_whole_blocks(GgmlType::kF32, 33));
}

TEST(Dequantize, RejectsPartialBlocks) {
    std::vector<uint8_t> raw(18);
    float out[33];
    EXPECT_THROW(dequantize_row(GgmlType::kQ4_0, raw.data(), out, 33), Error);
}

// ---- scalar conversions ----------------------------------------------------------

TEST(Dequantize, Fp16KnownValues) {
    EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
    EXPECT_EQ(fp16_to_float(0xC000), -2.0f);
    EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);                  // largest finite
    EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
    EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
    EXPECT_EQ(fp16_to_float(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
    EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);           // 1365 / 4096
    EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
    EXPECT_EQ(fp16_to_float(0x8000), 0.0f);
    EXPECT_EQ(fp16_to_float(0x7C00), INFINITY);
    EXPECT_EQ(fp16_to_float(0xFC00), -INFINITY);
    EXPECT_TRUE(std::isnan(fp16_to_float(0x7E00)));
}

// Every finite half converts to float and back to itself.
TEST(Dequantize, Fp16RoundTripsExhaustively) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0;
        if (is_nan) {
            EXPECT_TRUE(std::isnan(fp16_to_float(static_cast<uint16_t>(h))));
            continue;
        }
        ASSERT_EQ(float_to_fp16(fp16_to_float(static_cast<uint16_t>(h))), h) << "h=" << h;
    }
}

// Exactly between two neighbouring halves, float_to_fp16 picks the even one;
// a hair off the midpoint it picks the nearer one.
TEST(Dequantize, Fp16RoundsToNearestEven) {
    for (uint16_t low = 0; low < 0x7BFF; ++low) {
        const auto high = static_cast<uint16_t>(low + 1);
        const float a = fp16_to_float(low);
        const float b = fp16_to_float(high);
        const float mid = (a + b) / 2;  // exact: float has 13 more mantissa bits
        const uint16_t even = (low % 2 == 0) ? low : high;
        ASSERT_EQ(float_to_fp16(mid), even) << "low=" << low;
        ASSERT_EQ(float_to_fp16(-mid), even | 0x8000) << "low=" << low;
        ASSERT_EQ(float_to_fp16(std::nextafter(mid, 0.0f)), low) << "low=" << low;
        ASSERT_EQ(float_to_fp16(std::nextafter(mid, INFINITY)), high) << "low=" << low;
    }
    EXPECT_EQ(float_to_fp16(65519.996f), 0x7BFF);  // just under the tie: rounds to 65504
    EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);    // tie with 65536 (even): overflow to inf
    EXPECT_EQ(float_to_fp16(1e10f), 0x7C00);
    EXPECT_EQ(float_to_fp16(-1e10f), 0xFC00);
    EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0 (even)
    EXPECT_EQ(float_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
    EXPECT_EQ(float_to_fp16(1e-10f), 0x0000);
    EXPECT_EQ(float_to_fp16(INFINITY), 0x7C00);
    EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(NAN))));
}

TEST(Dequantize, Bf16KnownValues) {
    EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
    EXPECT_EQ(bf16_to_float(0xC0A0), -5.0f);
    EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);  // 0x40490000
    EXPECT_EQ(bf16_to_float(0x7F80), INFINITY);
}

// ---- hand-built blocks ---------------------------------------------------------

TEST(Dequantize, F32F16Bf16Rows) {
    std::vector<uint8_t> f32(8);
    const float values[2] = {1.5f, -0.125f};
    std::memcpy(f32.data(), values, 8);  // the test host is little-endian, like GGUF
    EXPECT_THAT(decode(GgmlType::kF32, f32, 2), testing::ElementsAre(1.5f, -0.125f));

    std::vector<uint8_t> f16(4);
    put_u16(f16, 0, 0x3E00);  // 1.5
    put_u16(f16, 2, 0xC500);  // -5.0
    EXPECT_THAT(decode(GgmlType::kF16, f16, 2), testing::ElementsAre(1.5f, -5.0f));

    std::vector<uint8_t> bf16(4);
    put_u16(bf16, 0, 0x3FC0);  // 1.5
    put_u16(bf16, 2, 0xC0A0);  // -5.0
    EXPECT_THAT(decode(GgmlType::kBF16, bf16, 2), testing::ElementsAre(1.5f, -5.0f));
}

// Q8_0: d = 0.25, q_i = i * 8 - 128 -> x_i = 2 * i - 32.
TEST(Dequantize, Q8_0HandBuilt) {
    std::vector<uint8_t> block(34);
    put_u16(block, 0, kHalfQuarter);
    for (int i = 0; i < 32; ++i)
        block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 8 - 128));
    const std::vector<float> x = decode(GgmlType::kQ8_0, block, 32);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(x[i], 2.0f * i - 32.0f) << i;
}

// Q4_0: d = 0.5; byte j = j (low nibble) | (15 - j) << 4 (high nibble).
// x_j = 0.5 * (j - 8), x_{j+16} = 0.5 * ((15 - j) - 8).
TEST(Dequantize, Q4_0HandBuilt) {
    std::vector<uint8_t> block(18);
    put_u16(block, 0, kHalfHalf);
    for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const std::vector<float> x = decode(GgmlType::kQ4_0, block, 32);
    EXPECT_EQ(x[0], -4.0f);
    EXPECT_EQ(x[8], 0.0f);
    EXPECT_EQ(x[15], 3.5f);
    EXPECT_EQ(x[16], 3.5f);   // high nibble of byte 0 is 15
    EXPECT_EQ(x[31], -4.0f);  // high nibble of byte 15 is 0
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(x[j], 0.5f * (j - 8)) << j;
        EXPECT_EQ(x[j + 16], 0.5f * (7 - j)) << j;
    }
}

// Q4_1: d = 0.5, m = -1; same nibbles as above. x_j = 0.5 * j - 1, x_{j+16} = 0.5 * (15 - j) - 1.
TEST(Dequantize, Q4_1HandBuilt) {
    std::vector<uint8_t> block(20);
    put_u16(block, 0, kHalfHalf);
    put_u16(block, 2, kHalfMinusOne);
    for (int j = 0; j < 16; ++j) block[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const std::vector<float> x = decode(GgmlType::kQ4_1, block, 32);
    EXPECT_EQ(x[0], -1.0f);
    EXPECT_EQ(x[1], -0.5f);
    EXPECT_EQ(x[15], 6.5f);
    EXPECT_EQ(x[16], 6.5f);
    EXPECT_EQ(x[31], -1.0f);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(x[j], 0.5f * j - 1.0f) << j;
        EXPECT_EQ(x[j + 16], 0.5f * (15 - j) - 1.0f) << j;
    }
}

// Q4_K with d = 1, dmin = 0.5 and the 6-bit scales / mins
//   sub-block:  0   1   2   3   4   5   6   7
//   scale    :  1   2   3   4  33  47  63  17
//   min      :  0   5  10  62  21  36  48   7
// packed by hand into 12 bytes:
//   bytes 0..3  = scale[0..3] | (scale[4..7] >> 4) << 6 : 0x81 0x82 0xC3 0x44
//   bytes 4..7  = min[0..3]   | (min[4..7]   >> 4) << 6 : 0x40 0x85 0xCA 0x3E
//   bytes 8..11 = (scale[4..7] & 15) | (min[4..7] & 15) << 4 : 0x51 0x4F 0x0F 0x71
// Code bytes: in each 32-byte chunk, byte l = (l % 16) | (15 - l % 16) << 4, so
// sub-block 2c has code l % 16 and sub-block 2c+1 has 15 - l % 16.
// x = scale * code - 0.5 * min.
TEST(Dequantize, Q4_KHandBuilt) {
    std::vector<uint8_t> block(144);
    put_u16(block, 0, kHalfOne);
    put_u16(block, 2, kHalfHalf);
    const uint8_t packed[12] = {0x81, 0x82, 0xC3, 0x44, 0x40, 0x85,
                                0xCA, 0x3E, 0x51, 0x4F, 0x0F, 0x71};
    std::memcpy(block.data() + 4, packed, 12);
    for (int i = 0; i < 128; ++i) {
        const int l = i % 32;
        block[16 + i] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
    }
    const std::vector<float> x = decode(GgmlType::kQ4_K, block, 256);

    // A few positions worked out by hand.
    EXPECT_EQ(x[0 * 32 + 5], 5.0f);    // sb 0: 1 * 5 - 0
    EXPECT_EQ(x[1 * 32 + 3], 21.5f);   // sb 1: 2 * 12 - 2.5
    EXPECT_EQ(x[2 * 32 + 20], 7.0f);   // sb 2: 3 * 4 - 5
    EXPECT_EQ(x[3 * 32 + 0], 29.0f);   // sb 3: 4 * 15 - 31
    EXPECT_EQ(x[4 * 32 + 2], 55.5f);   // sb 4: 33 * 2 - 10.5
    EXPECT_EQ(x[5 * 32 + 1], 640.0f);  // sb 5: 47 * 14 - 18
    EXPECT_EQ(x[6 * 32 + 7], 417.0f);  // sb 6: 63 * 7 - 24
    EXPECT_EQ(x[7 * 32 + 31], -3.5f);  // sb 7: 17 * 0 - 3.5

    // Every value, from the table above.
    const int scale[8] = {1, 2, 3, 4, 33, 47, 63, 17};
    const int min[8] = {0, 5, 10, 62, 21, 36, 48, 7};
    for (int sb = 0; sb < 8; ++sb) {
        for (int l = 0; l < 32; ++l) {
            const int code = (sb % 2 == 0) ? l % 16 : 15 - l % 16;
            EXPECT_EQ(x[32 * sb + l], scale[sb] * code - 0.5f * min[sb]) << sb << "," << l;
        }
    }
}

// Q6_K with d = 0.5 and scales[s] = s + 1 for even s, -(s + 1) for odd s.
// All code bits are 0 (code 0 - 32 = -32) except these, set by hand:
//   ql[0]   = 0xA5: value 0 low bits 5, value 64 low bits 10
//   ql[32]  = 0x0F: value 32 low bits 15, value 96 low bits 0
//   qh[0]   = 0x72: 2-bit groups (from bit 0) 2, 0, 3, 1 for values 0, 32, 64, 96
//   ql[66]  = 0x37: value 130 low bits 7, value 194 low bits 3
//   qh[34]  = 0x01: value 130 high bits 1 (value 194's are 0)
//   ql[127] = 0xF0, qh[63] = 0xC0: value 255 low bits 15, high bits 3
TEST(Dequantize, Q6_KHandBuilt) {
    std::vector<uint8_t> block(210);
    uint8_t* ql = block.data();
    uint8_t* qh = block.data() + 128;
    uint8_t* scales = block.data() + 192;
    ql[0] = 0xA5;
    ql[32] = 0x0F;
    qh[0] = 0x72;
    ql[66] = 0x37;
    qh[34] = 0x01;
    ql[127] = 0xF0;
    qh[63] = 0xC0;
    for (int s = 0; s < 16; ++s) {
        scales[s] = static_cast<uint8_t>(static_cast<int8_t>(s % 2 == 0 ? s + 1 : -(s + 1)));
    }
    put_u16(block, 208, kHalfHalf);
    const std::vector<float> x = decode(GgmlType::kQ6_K, block, 256);

    EXPECT_EQ(x[0], 2.5f);       // code 5 | 2 << 4 = 37 -> 5;    0.5 * 1 * 5
    EXPECT_EQ(x[32], -25.5f);    // code 15 | 0 << 4 = 15 -> -17; 0.5 * 3 * -17
    EXPECT_EQ(x[64], 65.0f);     // code 10 | 3 << 4 = 58 -> 26;  0.5 * 5 * 26
    EXPECT_EQ(x[96], -56.0f);    // code 0 | 1 << 4 = 16 -> -16;  0.5 * 7 * -16
    EXPECT_EQ(x[130], -40.5f);   // code 7 | 1 << 4 = 23 -> -9;   0.5 * 9 * -9
    EXPECT_EQ(x[194], -188.5f);  // code 3 -> -29;                0.5 * 13 * -29
    EXPECT_EQ(x[255], -248.0f);  // code 63 -> 31;                0.5 * -16 * 31
    EXPECT_EQ(x[1], -16.0f);     // untouched: 0.5 * 1 * -32
    EXPECT_EQ(x[16], 32.0f);     // untouched, scale 1 = -2: 0.5 * -2 * -32
    EXPECT_EQ(x[200], -208.0f);  // untouched, scale 12 = 13: 0.5 * 13 * -32
}

// Decoding a row of several blocks walks block by block.
TEST(Dequantize, MultiBlockRow) {
    std::vector<uint8_t> row(3 * 34);
    for (int b = 0; b < 3; ++b) {
        put_u16(row, 34 * b, kHalfOne);
        for (int i = 0; i < 32; ++i) row[34 * b + 2 + i] = static_cast<uint8_t>(b * 32 + i);
    }
    const std::vector<float> x = decode(GgmlType::kQ8_0, row, 96);
    for (int i = 0; i < 96; ++i) EXPECT_EQ(x[i], static_cast<float>(i)) << i;
}

// ---- goldens from the gguf Python package ----------------------------------------

struct GoldenCase {
    GgmlType type = GgmlType::kF32;
    std::vector<uint8_t> encoded;
    std::vector<float> values;
};

uint32_t read_le_u32(const std::vector<uint8_t>& bytes, size_t offset) {
    return static_cast<uint32_t>(bytes[offset]) | (static_cast<uint32_t>(bytes[offset + 1]) << 8) |
           (static_cast<uint32_t>(bytes[offset + 2]) << 16) |
           (static_cast<uint32_t>(bytes[offset + 3]) << 24);
}

// Reads one file in the format described in tools/goldens/make_dequant_goldens.py.
GoldenCase load_golden(const std::string& file_name) {
    const std::string path = std::string(SERVELAB_SOURCE_DIR) + "/data/golden/dequant/" + file_name;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read golden file " + path);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    if (bytes.size() < 16 || std::memcmp(bytes.data(), "SLDQ", 4) != 0) {
        throw std::runtime_error("bad golden file " + path);
    }
    GoldenCase golden;
    golden.type = static_cast<GgmlType>(read_le_u32(bytes, 4));
    const uint32_t count = read_le_u32(bytes, 8);
    const uint32_t encoded_bytes = read_le_u32(bytes, 12);
    if (bytes.size() != 16 + encoded_bytes + 4ull * count) {
        throw std::runtime_error("golden file " + path + " has the wrong size");
    }
    golden.encoded.assign(bytes.begin() + 16, bytes.begin() + 16 + encoded_bytes);
    golden.values.resize(count);
    std::memcpy(golden.values.data(), bytes.data() + 16 + encoded_bytes, 4ull * count);
    return golden;
}

class DequantizeGolden : public testing::TestWithParam<const char*> {};

TEST_P(DequantizeGolden, MatchesGgufPackageBitForBit) {
    const GoldenCase golden = load_golden(std::string("dequant_") + GetParam() + ".bin");
    const auto n = static_cast<int64_t>(golden.values.size());
    ASSERT_EQ(row_size_bytes(golden.type, n), static_cast<int64_t>(golden.encoded.size()));
    const std::vector<float> x = decode(golden.type, golden.encoded, n);
    for (int64_t i = 0; i < n; ++i) {
        // Compare bits, so -0.0 vs 0.0 would count as a difference too.
        ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), std::bit_cast<uint32_t>(golden.values[i]))
            << "value " << i << ": servelab " << x[i] << ", gguf " << golden.values[i];
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantizeGolden,
                         testing::Values("f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k"),
                         [](const auto& info) { return std::string(info.param); });

class QuantizeGolden : public testing::TestWithParam<const char*> {};

TEST_P(QuantizeGolden, MatchesGgufPackageBitForBit) {
    const GoldenCase golden = load_golden(std::string("quantize_") + GetParam() + ".bin");
    const std::vector<uint8_t> encoded = quantize_row(golden.type, golden.values);
    ASSERT_EQ(encoded.size(), golden.encoded.size());
    for (size_t i = 0; i < encoded.size(); ++i) {
        ASSERT_EQ(encoded[i], golden.encoded[i]) << "byte " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(WriterTypes, QuantizeGolden,
                         testing::Values("f16", "bf16", "q8_0", "q4_0", "q4_1"),
                         [](const auto& info) { return std::string(info.param); });

// ---- quantize -> dequantize round trips --------------------------------------------

// Random values with a different magnitude per 32-value block, fixed seed.
std::vector<float> random_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> magnitude(0.001f, 100.0f);
    std::vector<float> values(n);
    float scale = 1.0f;
    for (size_t i = 0; i < n; ++i) {
        if (i % 32 == 0) scale = magnitude(rng);
        values[i] = normal(rng) * scale;
    }
    return values;
}

std::vector<float> round_trip(GgmlType type, const std::vector<float>& values) {
    const std::vector<uint8_t> encoded = quantize_row(type, values);
    return decode(type, encoded, static_cast<int64_t>(values.size()));
}

constexpr size_t kRoundTripValues = 32 * 64;

TEST(QuantizeRoundTrip, F32IsExact) {
    const std::vector<float> x = random_values(kRoundTripValues, 1);
    EXPECT_EQ(round_trip(GgmlType::kF32, x), x);
}

// Relative error of round-to-nearest: half a unit in the last place,
// 2^-11 for fp16 (10 stored mantissa bits) and 2^-8 for bf16 (7 bits).
TEST(QuantizeRoundTrip, F16AndBf16WithinHalfAnUlp) {
    std::vector<float> x = random_values(kRoundTripValues, 2);
    for (float& v : x) v = std::fmod(v, 60000.0f);  // stay inside fp16's range
    const std::vector<float> f16 = round_trip(GgmlType::kF16, x);
    const std::vector<float> bf16 = round_trip(GgmlType::kBF16, x);
    for (size_t i = 0; i < x.size(); ++i) {
        const float abs_x = std::fabs(x[i]);
        // Below 2^-14 fp16 is subnormal: absolute error up to 2^-25.
        EXPECT_LE(std::fabs(f16[i] - x[i]), std::max(abs_x * 0x1p-11f, 0x1p-25f)) << i;
        EXPECT_LE(std::fabs(bf16[i] - x[i]), abs_x * 0x1p-8f) << i;
    }
}

// Per 32-value block, the largest error a format allows for the block's values.
template <typename BoundForBlock>
void expect_block_errors_within(GgmlType type, uint32_t seed, BoundForBlock bound_for_block) {
    const std::vector<float> x = random_values(kRoundTripValues, seed);
    const std::vector<float> y = round_trip(type, x);
    for (size_t block = 0; block < x.size() / 32; ++block) {
        float min = x[32 * block];
        float max = x[32 * block];
        for (size_t i = 32 * block; i < 32 * block + 32; ++i) {
            min = std::min(min, x[i]);
            max = std::max(max, x[i]);
        }
        const float bound = bound_for_block(min, max);
        for (size_t i = 32 * block; i < 32 * block + 32; ++i) {
            ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "block " << block << " value " << i;
        }
    }
}

// Q8_0: step d = amax / 127; rounding costs d / 2, storing d as fp16 at most
// 127 * d * 2^-11 more. Both together stay under one step, amax / 127.
TEST(QuantizeRoundTrip, Q8_0WithinOneStep) {
    expect_block_errors_within(GgmlType::kQ8_0, 3, [](float min, float max) {
        return std::max(std::fabs(min), std::fabs(max)) / 127.0f;
    });
}

// Q4_0: step |d| = amax / 8. Rounding costs |d| / 2, except at the far end
// (+8 steps) which is clamped to +7: up to one step. Plus fp16 error on d:
// 8 * |d| * 2^-11.
TEST(QuantizeRoundTrip, Q4_0WithinOneStep) {
    expect_block_errors_within(GgmlType::kQ4_0, 4, [](float min, float max) {
        const float step = std::max(std::fabs(min), std::fabs(max)) / 8.0f;
        return step * (1.0f + 8.0f * 0x1p-11f);
    });
}

// Q4_1: step d = (max - min) / 15. Rounding costs d / 2; fp16 storage of d
// adds up to 15 * d * 2^-11 and of m up to |min| * 2^-11.
TEST(QuantizeRoundTrip, Q4_1WithinHalfAStep) {
    expect_block_errors_within(GgmlType::kQ4_1, 5, [](float min, float max) {
        const float step = (max - min) / 15.0f;
        return step / 2 + (max - min) * 0x1p-11f + std::fabs(min) * 0x1p-11f + 1e-6f;
    });
}

// A block of equal values has d = 0; it must decode exactly, not as NaN.
TEST(QuantizeRoundTrip, ConstantAndZeroBlocks) {
    const std::vector<float> zeros(32, 0.0f);
    for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1}) {
        EXPECT_EQ(round_trip(type, zeros), zeros);
    }
    const std::vector<float> threes(32, 3.0f);
    EXPECT_EQ(round_trip(GgmlType::kQ4_1, threes), threes);  // d = 0, m = 3
}

TEST(QuantizeRoundTrip, RejectsKQuantsAndPartialBlocks) {
    const std::vector<float> x(256, 1.0f);
    EXPECT_THROW(quantize_row(GgmlType::kQ4_K, x), Error);
    EXPECT_THROW(quantize_row(GgmlType::kQ6_K, x), Error);
    const std::vector<float> odd(33, 1.0f);
    EXPECT_THROW(quantize_row(GgmlType::kQ8_0, odd), Error);
}

}  // namespace
}  // namespace servelab
