// fp8_test.cpp — FP8 E4M3 codec: known codes, exhaustive round trip, brute-force rounding.
//
// Part of Lab 3 (chapter 11.3, KV cache quantization). The encoder is checked
// against a reference that tries all 254 finite codes and keeps the nearest,
// so the test does not share any rounding logic with the code it tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/fp8.h"

namespace servelab {
namespace {

bool is_nan_code(int code) {
    return (code & 0x7F) == 0x7F;
}

// Nearest finite code to `x` by exhaustive search. Ties between two different
// values go to the even mantissa (lowest bit 0); between +0 and -0 (same value)
// to the one with the sign of x. Values past ±448 end up at ±448 because that
// is the nearest finite code.
//
// Distances are compared in double. For 2^-9 <= |x| <= 2^20 every difference
// x - code is exact there (it needs at most 53 bits). Larger |x| is clamped to
// 2^20 first — the answer is ±448 either way, but 1e30 - 448 and 1e30 + 448
// would round to the same double and look like a tie. Below 2^-9 only zero and
// ±2^-9 compete, and their distances are too far apart for rounding to matter.
uint8_t brute_force_encode(float x) {
    x = std::clamp(x, -0x1p20f, 0x1p20f);
    int best = -1;
    double best_distance = std::numeric_limits<double>::infinity();
    for (int code = 0; code < 256; ++code) {
        if (is_nan_code(code)) continue;
        const float decoded = fp8_e4m3_to_float(uint8_t(code));
        const double distance = std::fabs(double(decoded) - double(x));
        bool better = distance < best_distance;
        if (distance == best_distance) {
            const float best_decoded = fp8_e4m3_to_float(uint8_t(best));
            if (decoded == best_decoded) {  // +0 vs -0
                better = std::signbit(decoded) == std::signbit(x);
            } else {
                better = (code & 1) == 0;
            }
        }
        if (better) {
            best = code;
            best_distance = distance;
        }
    }
    return uint8_t(best);
}

void expect_matches_reference(float x) {
    const uint8_t got = float_to_fp8_e4m3(x);
    const uint8_t want = brute_force_encode(x);
    EXPECT_EQ(int(got), int(want))
        << "x = " << std::hexfloat << x << " decodes to " << fp8_e4m3_to_float(got)
        << ", nearest is " << fp8_e4m3_to_float(want);
}

// The 127 non-negative finite values, ascending (codes 0x00..0x7E are in value order).
std::vector<float> positive_grid() {
    std::vector<float> grid;
    for (int code = 0x00; code <= 0x7E; ++code) grid.push_back(fp8_e4m3_to_float(uint8_t(code)));
    return grid;
}

TEST(Fp8E4M3, DecodesKnownCodes) {
    EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
    EXPECT_FALSE(std::signbit(fp8_e4m3_to_float(0x00)));
    EXPECT_EQ(fp8_e4m3_to_float(0x80), 0.0f);
    EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
    EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));         // smallest subnormal
    EXPECT_EQ(fp8_e4m3_to_float(0x07), 7.0f * std::ldexp(1.0f, -9));  // largest subnormal
    EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));         // smallest normal
    EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
    EXPECT_EQ(fp8_e4m3_to_float(0x39), 1.125f);
    EXPECT_EQ(fp8_e4m3_to_float(0xB8), -1.0f);
    EXPECT_EQ(fp8_e4m3_to_float(0x78), 256.0f);
    EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
    EXPECT_EQ(fp8_e4m3_to_float(0x7E), kFp8E4M3Max);
    EXPECT_EQ(fp8_e4m3_to_float(0xFE), -448.0f);
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xFF)));
}

TEST(Fp8E4M3, OnlyTwoCodesAreNan) {
    int nan_count = 0;
    for (int code = 0; code < 256; ++code) {
        const float decoded = fp8_e4m3_to_float(uint8_t(code));
        EXPECT_FALSE(std::isinf(decoded)) << "code " << code;
        if (std::isnan(decoded)) ++nan_count;
    }
    EXPECT_EQ(nan_count, 2);
}

TEST(Fp8E4M3, RoundTripsEveryFiniteCode) {
    for (int code = 0; code < 256; ++code) {
        if (is_nan_code(code)) continue;
        // Includes 0x80: -0.0 encodes back to 0x80, not 0x00.
        EXPECT_EQ(int(float_to_fp8_e4m3(fp8_e4m3_to_float(uint8_t(code)))), code)
            << "code " << code;
    }
}

TEST(Fp8E4M3, EncodesSpecialInputs) {
    EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
    EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
    EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
    EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
    EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::max()), 0x7E);
    EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::max()), 0xFE);
    EXPECT_EQ(float_to_fp8_e4m3(0.0f), 0x00);
    EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
    EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
    EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
}

TEST(Fp8E4M3, RoundsTiesToEven) {
    // Worked examples. Near 1 the step is 1/8; near 2^-9 it is 2^-9.
    EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);                 // 1 + 1/16 -> 1.0 (M=0)
    EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3A);                 // 1 + 3/16 -> 1.25 (M=2)
    EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half of 2^-9 -> 0
    EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 * 2^-9 -> 2 * 2^-9
    EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(15.0f, -10)), 0x08);  // 7.5 * 2^-9 -> 2^-6
    EXPECT_EQ(float_to_fp8_e4m3(464.0f), 0x7E);                  // past 448: saturate
}

TEST(Fp8E4M3, MidpointsAndNeighborsMatchBruteForce) {
    const std::vector<float> grid = positive_grid();
    std::vector<float> inputs;
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
        // a and b have at most 4 significant bits, so their midpoint is exact in float.
        const float mid = (grid[i] + grid[i + 1]) / 2.0f;
        inputs.push_back(mid);
        inputs.push_back(std::nextafter(mid, 0.0f));
        inputs.push_back(std::nextafter(mid, 1000.0f));
        inputs.push_back(std::nextafter(grid[i], 0.0f));
        inputs.push_back(std::nextafter(grid[i], 1000.0f));
    }
    // Around the top: 464 would be the midpoint to the next value if there were one.
    for (float x : {448.0f, 464.0f, 480.0f, 1000.0f, 1e30f}) {
        inputs.push_back(std::nextafter(x, 0.0f));
        inputs.push_back(x);
        inputs.push_back(std::nextafter(x, 2e30f));
    }
    for (float x : inputs) {
        expect_matches_reference(x);
        expect_matches_reference(-x);
    }
}

TEST(Fp8E4M3, RandomLogUniformMatchesBruteForce) {
    std::mt19937 rng(20240611);
    std::uniform_real_distribution<float> log2_magnitude(-12.0f, 10.0f);
    std::bernoulli_distribution negative(0.5);
    for (int i = 0; i < 100000; ++i) {
        const float magnitude = std::exp2(log2_magnitude(rng));
        expect_matches_reference(negative(rng) ? -magnitude : magnitude);
        if (HasFailure()) return;  // one failure is enough; don't print 100000
    }
}

TEST(Fp8E4M3, RandomBitPatternsMatchBruteForce) {
    // Any float at all: huge, tiny, float subnormals. NaNs are tested separately.
    std::mt19937 rng(7);
    for (int i = 0; i < 100000; ++i) {
        const uint32_t bits = uint32_t(rng());
        float x;
        static_assert(sizeof(x) == sizeof(bits));
        std::memcpy(&x, &bits, sizeof(x));
        if (std::isnan(x)) continue;
        expect_matches_reference(x);
        if (HasFailure()) return;
    }
}

}  // namespace
}  // namespace servelab
