// group_quantizer_test.cpp — round-to-nearest in groups (Lab 10's first exercise), and the
// blocks a GGUF file stores.
//
// RtnQuantizer.* grade reference/quant/group_quantizer.cpp: the grid of a
// group (symmetric, as Q4_0 and Q8_0 store it; asymmetric, as Q4_1 does),
// the nearest code, and a row cut into groups with a shorter last one. The
// expected values come from the formulas written out here, not from the
// functions under test. QuantizedBlocks.* check that what the methods
// produce is written as blocks llama.cpp reads: packed, written, parsed
// and dequantized back to the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/gguf_writer.h"
#include "reference/quant/block_packing.h"
#include "reference/quant/group_quantizer.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::GuardedArray;
using test::RandomSource;

float fp16(float value) {
    return fp16_to_float(float_to_fp16(value));
}

// The group's parameters by the formulas of group_quantizer.h, computed here.
GroupParams expected_params(const std::vector<float>& w, const QuantScheme& scheme) {
    GroupParams p;
    if (scheme.symmetric) {
        float m = 0.0f;
        for (float x : w) m = std::fabs(x) > std::fabs(m) ? x : m;
        p.scale = fp16(m / -float(1 << (scheme.bits - 1)));
        return p;
    }
    const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
    p.scale = fp16((*hi - *lo) / float((1 << scheme.bits) - 1));
    p.offset = fp16(*lo);
    return p;
}

// The value nearest to w on the group's grid, searched over every code.
float nearest_on_grid(float w, const GroupParams& p, const QuantScheme& scheme) {
    float best = float(scheme.min_code()) * p.scale + p.offset;
    for (int code = scheme.min_code(); code <= scheme.max_code(); ++code) {
        const float value = float(code) * p.scale + p.offset;
        if (std::fabs(value - w) < std::fabs(best - w)) best = value;
    }
    return best;
}

// Weights that look like a layer's: normal, with a few large ones.
std::vector<float> layer_like(RandomSource& random, size_t n) {
    std::vector<float> w = random.normal(n, 0.05f);
    for (int k = 0; k < 3; ++k) w[size_t(random.integer(0, int64_t(n) - 1))] *= 8.0f;
    return w;
}

TEST(RtnQuantizer, SymmetricGridPutsTheLargestMagnitudeOnTheEndCode) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int bits : {4, 8, 3}) {
        const QuantScheme scheme{.bits = bits, .symmetric = true, .group_size = 32};
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<float> w = layer_like(random, 32);
            // Half the trials the largest magnitude is negative, half positive.
            const size_t peak = size_t(random.integer(0, 31));
            float largest = 0.0f;
            for (float x : w) largest = std::max(largest, std::fabs(x));
            w[peak] = (trial % 2 == 0 ? -1.0f : 1.0f) * (0.1f + largest);
            const GroupParams want = expected_params(w, scheme);
            const GroupParams got = fit_group(w.data(), 32, scheme);
            const float m = w[peak];
            if (got.scale == fp16(std::fabs(m) / float(scheme.max_code()))) {
                FAIL() << bits << "-bit symmetric group, largest magnitude " << m
                       << ": the scale is |m| / " << scheme.max_code() << ", so code "
                       << scheme.min_code()
                       << " is never used. The grid reaches the signed weight m of largest "
                          "magnitude with the end code: scale = m / "
                       << scheme.min_code() << " (" << want.scale << ")";
            }
            if (got.scale == m / float(scheme.min_code()) && got.scale != want.scale) {
                FAIL() << "scale " << got.scale << " is not rounded to fp16 (" << want.scale
                       << "): a block stores its scale as fp16, and the codes must be the "
                          "nearest for the scale the file really holds";
            }
            ASSERT_EQ(got.scale, want.scale)
                << bits << "-bit symmetric group: scale = m / " << scheme.min_code()
                << " with m the signed weight of largest magnitude (" << m << "), in fp16";
            ASSERT_EQ(got.offset, 0.0f) << "a symmetric grid has no offset";
            const int code = quantize_weight(m, got, scheme);
            EXPECT_EQ(code, scheme.min_code())
                << "the largest-magnitude weight " << m << " must land on the end code";
        }
    }
}

// Two weights of the same largest magnitude and opposite signs: the first one
// sets the sign of the scale (llama.cpp's Q4_0 quantizer keeps its running
// maximum unless a later weight is strictly larger), so a file is the same
// whichever quantizer wrote it.
TEST(RtnQuantizer, OfEqualMagnitudesTheFirstSetsTheScale) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const QuantScheme scheme{.bits = 4, .symmetric = true, .group_size = 32};
    for (const float first_sign : {1.0f, -1.0f}) {
        std::vector<float> w = random.uniform(32, -0.1f, 0.1f);
        w[3] = first_sign * 0.5f;
        w[20] = -first_sign * 0.5f;
        const GroupParams got = fit_group(w.data(), 32, scheme);
        EXPECT_EQ(got.scale, fp16(w[3] / -8.0f))
            << "weights 3 (" << w[3] << ") and 20 (" << w[20]
            << ") share the largest magnitude: the first sets the scale, m / −8 = "
            << fp16(w[3] / -8.0f) << "; replace the running maximum only when a weight is "
            << "strictly larger";
    }
}

TEST(RtnQuantizer, AsymmetricGridSpansMinToMax) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int bits : {4, 2, 3, 8}) {
        const QuantScheme scheme{.bits = bits, .symmetric = false, .group_size = 64};
        for (int trial = 0; trial < 20; ++trial) {
            const std::vector<float> w = layer_like(random, 64);
            const GroupParams want = expected_params(w, scheme);
            const GroupParams got = fit_group(w.data(), 64, scheme);
            const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
            if (got.scale == fp16((*hi - *lo) / float(1 << bits))) {
                FAIL() << bits << "-bit asymmetric group from " << *lo << " to " << *hi
                       << ": the scale is (max − min) / 2^" << bits
                       << ", so the top code stops short of the largest weight. There are 2^b "
                          "codes, 0 .. 2^b − 1, and 2^b − 1 steps between them: scale = (max − "
                          "min) / "
                       << scheme.max_code() << " (" << want.scale << ")";
            }
            ASSERT_EQ(got.scale, want.scale)
                << bits << "-bit asymmetric group: scale = (max − min) / (2^b − 1), in fp16";
            ASSERT_EQ(got.offset, want.offset)
                << "asymmetric group: offset = the group's minimum (" << *lo << "), in fp16";
            EXPECT_EQ(quantize_weight(*lo, got, scheme), 0) << "the minimum is code 0";
            EXPECT_EQ(quantize_weight(*hi, got, scheme), scheme.max_code())
                << "the maximum is the top code";
        }
    }
}

TEST(RtnQuantizer, CodesAreTheNearestAndClamped) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (const QuantScheme& scheme :
         {QuantScheme{.bits = 4, .symmetric = true, .group_size = 32},
          QuantScheme{.bits = 4, .symmetric = false, .group_size = 32},
          QuantScheme{.bits = 3, .symmetric = true, .group_size = 32},
          QuantScheme{.bits = 8, .symmetric = true, .group_size = 32}}) {
        const std::vector<float> w = layer_like(random, 32);
        const GroupParams p = fit_group(w.data(), 32, scheme);
        // Weights inside the group's range and around it.
        for (const float x : random.uniform(400, -0.6f, 0.6f)) {
            const int code = quantize_weight(x, p, scheme);
            ASSERT_GE(code, scheme.min_code())
                << "weight " << x << ": codes are clamped to the grid";
            ASSERT_LE(code, scheme.max_code())
                << "weight " << x << ": codes are clamped to the grid";
            const float value = dequantize_code(code, p);
            const float best = nearest_on_grid(x, p, scheme);
            const float exact = (x - p.offset) / p.scale;
            const bool truncated = code == int(std::trunc(exact)) &&
                                   std::fabs(exact - std::trunc(exact)) > 0.5f &&
                                   code > scheme.min_code() && code < scheme.max_code();
            ASSERT_LE(std::fabs(value - x), std::fabs(best - x) + 1e-6f * std::fabs(p.scale))
                << scheme.bits << "-bit " << (scheme.symmetric ? "symmetric" : "asymmetric")
                << ": weight " << x << " became code " << code << " (" << value
                << ") where the nearest value on the grid is " << best
                << (truncated ? ": (w − offset) / scale = " + std::to_string(exact) +
                                    " was truncated toward zero; round to the nearest code"
                              : "");
        }
        // A group of equal weights has scale 0 and one value: code 0 stands for it.
        const std::vector<float> flat(32, 0.375f);
        const GroupParams flat_params = fit_group(flat.data(), 32, scheme);
        const float back =
            dequantize_code(quantize_weight(0.375f, flat_params, scheme), flat_params);
        if (!scheme.symmetric) {
            EXPECT_EQ(back, fp16(0.375f)) << "a group of equal weights is its offset, exactly";
            EXPECT_EQ(quantize_weight(0.375f, flat_params, scheme), 0)
                << "with scale 0 every code stands for the offset: return code 0";
        }
        const GroupParams zero_scale{0.0f, 0.0f};
        EXPECT_EQ(quantize_weight(0.0f, zero_scale, scheme), 0)
            << "a group of zeros has scale 0: its weights are code 0";
        EXPECT_FALSE(std::isnan(back)) << "a zero scale must not divide by zero";
    }
}

// rtn_quantize_row against the formulas, on rows whose last group is short.
TEST(RtnQuantizer, RowsQuantizeGroupByGroupWithAShortLastGroup) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (const QuantScheme& scheme :
         {QuantScheme{.bits = 4, .symmetric = true, .group_size = 32},
          QuantScheme{.bits = 4, .symmetric = false, .group_size = 64},
          QuantScheme{.bits = 3, .symmetric = false, .group_size = 128},
          QuantScheme{.bits = 2, .symmetric = true, .group_size = 16}}) {
        const int64_t cols = 3 * scheme.group_size + random.integer(1, scheme.group_size - 1);
        const std::vector<float> w = layer_like(random, size_t(cols));
        // Outputs end at a guard page: a group read or written past the row stops the test.
        GuardedArray<float> input(w);
        GuardedArray<float> out(static_cast<size_t>(cols));
        GuardedArray<GroupParams> params(size_t(scheme.num_groups(cols)), GroupParams{NAN, NAN});
        rtn_quantize_row(input.data(), out.data(), params.data(), cols, scheme);

        std::vector<float> want(static_cast<size_t>(cols));
        for (int64_t first = 0; first < cols; first += scheme.group_size) {
            const int64_t length = std::min(scheme.group_size, cols - first);
            const std::vector<float> group(w.begin() + first, w.begin() + first + length);
            const GroupParams p = expected_params(group, scheme);
            const GroupParams& got = params[size_t(first / scheme.group_size)];
            ASSERT_TRUE(got.scale == p.scale && got.offset == p.offset)
                << "group " << first / scheme.group_size << " (columns " << first << " .. "
                << first + length - 1 << " of " << cols << "): params (" << got.scale << ", "
                << got.offset << ") where (" << p.scale << ", " << p.offset
                << ") is expected: each group is fitted on its own weights"
                << (first + length == cols
                        ? ", the last one on the " + std::to_string(length) + " weights left"
                        : "");
            for (int64_t i = first; i < first + length; ++i) {
                want[size_t(i)] = nearest_on_grid(w[size_t(i)], p, scheme);
            }
        }
        for (int64_t i = 0; i < cols; ++i) {
            ASSERT_NEAR(out[size_t(i)], want[size_t(i)], 1e-6 * std::fabs(want[size_t(i)]) + 1e-9)
                << scheme.bits << "-bit, groups of " << scheme.group_size << ", column " << i
                << " of " << cols << ": every weight becomes the nearest value on its group's grid";
        }
        // In place (out aliasing the weights) gives the same values.
        std::vector<float> in_place = w;
        rtn_quantize_row(in_place.data(), in_place.data(), nullptr, cols, scheme);
        ASSERT_TRUE(
            test::equal_or_explain("rtn_quantize_row in place", in_place, out.to_vector(), 0.0))
            << "out may alias the weights: fit each group before overwriting it";
    }
}

TEST(RtnQuantizer, MatrixRowsAreIndependent) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const QuantScheme scheme{.bits = 4, .symmetric = false, .group_size = 32};
    const int64_t rows = 9, cols = 96;
    const std::vector<float> w = layer_like(random, size_t(rows * cols));
    std::vector<float> out(w.size(), NAN);
    std::vector<GroupParams> params(size_t(rows * 3));
    rtn_quantize_matrix(w.data(), out.data(), params.data(), rows, cols, scheme);
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> row(static_cast<size_t>(cols));
        rtn_quantize_row(w.data() + r * cols, row.data(), nullptr, cols, scheme);
        ASSERT_TRUE(test::equal_or_explain("row " + std::to_string(r),
                                           std::span(out).subspan(size_t(r * cols), size_t(cols)),
                                           row, 0.0));
    }
}

TEST(QuantScheme, BitsPerWeightCountTheSharedParameters) {
    EXPECT_DOUBLE_EQ(bits_per_weight(QuantScheme{.bits = 4, .symmetric = true, .group_size = 32}),
                     4.5);  // Q4_0
    EXPECT_DOUBLE_EQ(bits_per_weight(QuantScheme{.bits = 4, .symmetric = false, .group_size = 32}),
                     5.0);  // Q4_1
    EXPECT_DOUBLE_EQ(bits_per_weight(QuantScheme{.bits = 8, .symmetric = true, .group_size = 32}),
                     8.5);  // Q8_0
    EXPECT_DOUBLE_EQ(bits_per_weight(QuantScheme{.bits = 3, .symmetric = false, .group_size = 128}),
                     3.25);
}

// ---------------------------------------------------------------- GGUF blocks

struct PackCase {
    GgmlType type;
    QuantScheme scheme;
};

// Quantized rows written into a GGUF, read back and dequantized: the same numbers.
TEST(QuantizedBlocks, RoundTripThroughTheGgufReader) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const PackCase cases[] = {
        {GgmlType::kQ4_0, QuantScheme{.bits = 4, .symmetric = true, .group_size = 32}},
        {GgmlType::kQ4_0, QuantScheme{.bits = 4, .symmetric = true, .group_size = 128}},
        {GgmlType::kQ4_1, QuantScheme{.bits = 4, .symmetric = false, .group_size = 32}},
        {GgmlType::kQ4_1, QuantScheme{.bits = 4, .symmetric = false, .group_size = 64}},
        {GgmlType::kQ8_0, QuantScheme{.bits = 8, .symmetric = true, .group_size = 32}},
        {GgmlType::kF16, QuantScheme{.bits = 3, .symmetric = false, .group_size = 48}},
        {GgmlType::kF16, QuantScheme{.bits = 2, .symmetric = true, .group_size = 128}}};
    for (const PackCase& c : cases) {
        const int64_t rows = 5, cols = 256;
        SCOPED_TRACE(std::string(ggml_type_traits(c.type).name) + " groups of " +
                     std::to_string(c.scheme.group_size));
        const std::vector<float> w = layer_like(random, size_t(rows * cols));
        std::vector<float> values(w.size());
        std::vector<GroupParams> params(size_t(rows * c.scheme.num_groups(cols)));
        rtn_quantize_matrix(w.data(), values.data(), params.data(), rows, cols, c.scheme);

        GgufWriter writer;
        writer.add_string("general.architecture", "llama");
        writer.add_tensor(
            "w", {cols, rows}, c.type,
            pack_quantized_rows(c.type, values.data(), params.data(), rows, cols, c.scheme));
        const std::vector<uint8_t> bytes = writer.to_bytes();  // parse does not copy them
        const GgufFile file = GgufFile::parse(bytes);
        const GgufTensorInfo* info = file.find_tensor("w");
        ASSERT_NE(info, nullptr);
        ASSERT_EQ(info->type, c.type);
        std::vector<float> back(w.size(), NAN);
        const int64_t row_bytes = row_size_bytes(c.type, cols);
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(c.type, info->data + r * row_bytes, back.data() + r * cols, cols);
        }
        // F16 rounds each value; a quantized block holds the very numbers.
        const double tolerance = c.type == GgmlType::kF16 ? 1e-3 : 1e-6;
        for (size_t k = 0; k < w.size(); ++k) {
            ASSERT_NEAR(back[k], values[k], tolerance * std::fabs(values[k]) + 1e-9)
                << "element " << k;
        }
    }
}

TEST(QuantizedBlocks, TypesRefuseGridsTheyCannotStore) {
    const auto why = [](GgmlType type, QuantScheme scheme) {
        return why_type_cannot_store(type, scheme);
    };
    EXPECT_EQ(why(GgmlType::kQ4_0, QuantScheme{.bits = 4, .symmetric = true, .group_size = 64}),
              "");
    EXPECT_NE(why(GgmlType::kQ4_0, QuantScheme{.bits = 4, .symmetric = false, .group_size = 32})
                  .find("symmetric"),
              std::string::npos);
    EXPECT_NE(why(GgmlType::kQ4_1, QuantScheme{.bits = 3, .symmetric = false, .group_size = 32})
                  .find("4-bit"),
              std::string::npos);
    EXPECT_NE(why(GgmlType::kQ8_0, QuantScheme{.bits = 8, .symmetric = true, .group_size = 48})
                  .find("32 weights"),
              std::string::npos);
    EXPECT_EQ(why(GgmlType::kF16, QuantScheme{.bits = 2, .symmetric = false, .group_size = 7}), "");
    EXPECT_NE(why(GgmlType::kQ4_K, QuantScheme{.bits = 4, .symmetric = false, .group_size = 32}),
              "");

    // A value that is not on its group's grid is refused, not rounded silently.
    const std::vector<float> w = {0.1f, -0.2f, 0.3f, 0.05f};
    std::vector<float> values(32, 0.0f);
    std::copy(w.begin(), w.end(), values.begin());
    std::vector<GroupParams> params(1);
    const QuantScheme q4 = QuantScheme{.bits = 4, .symmetric = true, .group_size = 32};
    rtn_quantize_row(values.data(), values.data(), params.data(), 32, q4);
    values[5] += 0.3f * params[0].scale;
    const std::string message = test::error_of(
        [&] { pack_quantized_rows(GgmlType::kQ4_0, values.data(), params.data(), 1, 32, q4); });
    EXPECT_NE(message.find("not on its group's grid"), std::string::npos) << message;
}

}  // namespace
}  // namespace servelab
