// kernels_test.cpp — the plain CPU kernels against their formulas, on random inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/swiglu.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

TEST(RmsNorm, MatchesFormula) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t dim = 576;
    const std::vector<float> x = random.normal(dim, 3.0f);
    const std::vector<float> w = random.normal(dim);
    std::vector<float> out(dim, NAN);
    rmsnorm(x.data(), w.data(), out.data(), dim, 1e-5f);
    double ms = 0;
    for (float v : x) ms += double(v) * v;
    const double inv = 1.0 / std::sqrt(ms / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(out[i], x[i] * inv * w[i], 1e-5);
}

TEST(RmsNorm, RowsNormalizeIndependently) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t dim = 64, rows = 5;
    std::vector<float> x = random.normal(dim * rows);
    const std::vector<float> w = random.normal(dim);
    std::vector<float> all(dim * rows, NAN), one(dim, NAN);
    rmsnorm_rows(x.data(), w.data(), all.data(), rows, dim, 1e-6f);
    for (int64_t r = 0; r < rows; ++r) {
        rmsnorm(x.data() + r * dim, w.data(), one.data(), dim, 1e-6f);
        for (int64_t i = 0; i < dim; ++i) EXPECT_EQ(all[r * dim + i], one[i]);
    }
}

TEST(Softmax, SumsToOneAndIsShiftInvariant) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    std::vector<float> x = random.normal(1000, 10.0f);
    std::vector<float> shifted = x;
    for (float& v : shifted) v += 100.0f;  // exp(140) overflows float without the max trick
    softmax(x.data(), 1000);
    softmax(shifted.data(), 1000);
    double sum = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        sum += x[i];
        // The shift itself rounds the inputs (float spacing near 128 is 7.6e-6),
        // so probabilities agree to that relative precision, not exactly.
        EXPECT_NEAR(x[i], shifted[i], 2e-5 * x[i] + 1e-9);
        EXPECT_TRUE(std::isfinite(shifted[i]));
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
}

TEST(Rope, RotatesAdjacentPairsByPositionAngle) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const RopeParams params{16, 12, 10000.0f};  // last 4 dims of each head not rotated
    const int64_t heads = 3, position = random.integer(0, 5000);
    std::vector<float> x = random.normal(heads * 16);
    const std::vector<float> original = x;
    rope_apply(x.data(), heads, position, params);
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < 6; ++i) {
            const double angle = position * std::pow(10000.0, -2.0 * i / 12.0);
            const double a = original[h * 16 + 2 * i], b = original[h * 16 + 2 * i + 1];
            EXPECT_NEAR(x[h * 16 + 2 * i], a * std::cos(angle) - b * std::sin(angle), 1e-5);
            EXPECT_NEAR(x[h * 16 + 2 * i + 1], a * std::sin(angle) + b * std::cos(angle), 1e-5);
        }
        for (int64_t d = 12; d < 16; ++d) EXPECT_EQ(x[h * 16 + d], original[h * 16 + d]);
    }
}

TEST(Rope, PositionZeroIsIdentityAndNormIsKept) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const RopeParams params{64, 64, 100000.0f};
    std::vector<float> x = random.normal(64);
    const std::vector<float> original = x;
    rope_apply(x.data(), 1, 0, params);
    EXPECT_EQ(x, original);
    rope_apply(x.data(), 1, 1234, params);
    double n0 = 0, n1 = 0;
    for (size_t i = 0; i < x.size(); ++i) n0 += original[i] * original[i], n1 += x[i] * x[i];
    EXPECT_NEAR(n0, n1, 1e-3 * n0);
}

TEST(Matmul, FastEqualsPlainForRaggedShapes) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 6; ++trial) {
        const int64_t tokens = random.integer(1, 11), in = random.integer(1, 300),
                      out = random.integer(1, 70);
        const std::vector<float> x = random.normal(tokens * in);
        const std::vector<float> w = random.normal(out * in);
        std::vector<float> fast(tokens * out, NAN), plain(tokens * out, NAN);
        matmul(x.data(), w.data(), fast.data(), tokens, in, out);
        matmul_plain(x.data(), w.data(), plain.data(), tokens, in, out);
        for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t o = 0; o < out; ++o) {
                double exact = 0;
                for (int64_t i = 0; i < in; ++i) exact += double(x[t * in + i]) * w[o * in + i];
                EXPECT_NEAR(fast[t * out + o], exact, 1e-4 * std::sqrt(double(in)));
                EXPECT_NEAR(plain[t * out + o], exact, 1e-4 * std::sqrt(double(in)));
            }
        }
    }
}

TEST(SwiGlu, MatchesFormula) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<float> gate = random.normal(100, 4.0f), up = random.normal(100);
    std::vector<float> out(100, NAN);
    swiglu(gate.data(), up.data(), out.data(), 100);
    for (int i = 0; i < 100; ++i) {
        EXPECT_NEAR(out[i], gate[i] / (1 + std::exp(-double(gate[i]))) * up[i], 1e-5);
    }
}

TEST(Residual, Adds) {
    RandomSource random;
    std::vector<float> x = random.normal(50);
    const std::vector<float> before = x, d = random.normal(50);
    add_inplace(x.data(), d.data(), 50);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(x[i], before[i] + d[i]);
}

// The reference: attention written straight from the formula, in double,
// with the KV heads explicitly repeated for every query head.
std::vector<float> attention_formula(const std::vector<float>& q, const std::vector<float>& k,
                                     const std::vector<float>& v, const AttentionShape& s) {
    std::vector<float> out(s.num_queries * s.num_heads * s.head_dim);
    const int64_t group = s.num_heads / s.num_kv_heads;
    for (int64_t t = 0; t < s.num_queries; ++t) {
        const int64_t pos = s.num_keys - s.num_queries + t;
        for (int64_t h = 0; h < s.num_heads; ++h) {
            std::vector<double> p(pos + 1);
            double max_score = -1e300, sum = 0;
            for (int64_t j = 0; j <= pos; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < s.head_dim; ++d) {
                    dot += double(q[(t * s.num_heads + h) * s.head_dim + d]) *
                           k[(j * s.num_kv_heads + h / group) * s.head_dim + d];
                }
                p[j] = dot / std::sqrt(double(s.head_dim));
                max_score = std::max(max_score, p[j]);
            }
            for (double& x : p) sum += (x = std::exp(x - max_score));
            for (int64_t d = 0; d < s.head_dim; ++d) {
                double acc = 0;
                for (int64_t j = 0; j <= pos; ++j) {
                    acc += p[j] / sum * v[(j * s.num_kv_heads + h / group) * s.head_dim + d];
                }
                out[(t * s.num_heads + h) * s.head_dim + d] = float(acc);
            }
        }
    }
    return out;
}

TEST(Attention, CausalGqaMatchesFormulaForSeveralHeadRatios) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    // (heads, kv heads): MHA, GQA 2:1 and 3:1, MQA.
    for (auto [heads, kv_heads] : {std::pair{4, 4}, {4, 2}, {9, 3}, {6, 1}}) {
        const int64_t tokens = random.integer(1, 9);
        const AttentionShape shape{tokens, tokens, heads, kv_heads, 8};
        const auto q = random.normal(shape.num_queries * heads * 8);
        const auto k = random.normal(shape.num_keys * kv_heads * 8);
        const auto v = random.normal(shape.num_keys * kv_heads * 8);
        std::vector<float> out(q.size(), NAN);
        attention_causal(q.data(), k.data(), v.data(), out.data(), shape);
        const auto expected = attention_formula(q, k, v, shape);
        for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-5);
    }
}

TEST(Attention, QueriesAfterCachedKeysSeeEarlierKeys) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const AttentionShape shape{3, 10, 4, 2, 16};  // 3 new tokens after 7 earlier ones
    const auto q = random.normal(3 * 4 * 16);
    const auto k = random.normal(10 * 2 * 16), v = random.normal(10 * 2 * 16);
    std::vector<float> out(q.size(), NAN);
    attention_causal(q.data(), k.data(), v.data(), out.data(), shape);
    const auto expected = attention_formula(q, k, v, shape);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-5);
}

TEST(Attention, FirstTokenAttendsOnlyToItself) {
    RandomSource random;
    const AttentionShape shape{4, 4, 2, 1, 8};
    const auto q = random.normal(4 * 2 * 8), k = random.normal(4 * 8), v = random.normal(4 * 8);
    std::vector<float> out(q.size(), NAN);
    attention_causal(q.data(), k.data(), v.data(), out.data(), shape);
    for (int h = 0; h < 2; ++h) {
        for (int d = 0; d < 8; ++d) EXPECT_FLOAT_EQ(out[h * 8 + d], v[d]);
    }
}

}  // namespace
}  // namespace servelab
