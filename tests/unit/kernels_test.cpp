// kernels_test.cpp — the plain CPU kernels against their formulas, on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

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

// out_i = x_i / sqrt(mean(x^2) + eps) * w_i, and what common mistakes give instead.
std::vector<float> rmsnorm_formula(const std::vector<float>& x, const std::vector<float>& w,
                                   double eps, bool root = true, bool mean = true,
                                   bool weight = true) {
    double sum_squares = 0;
    for (float v : x) sum_squares += double(v) * v;
    const double statistic = (mean ? sum_squares / double(x.size()) : sum_squares) + eps;
    const double inv = 1.0 / (root ? std::sqrt(statistic) : statistic);
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = float(x[i] * inv * (weight ? w[i] : 1.0f));
    return out;
}

TEST(RmsNorm, MatchesFormula) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t dim = 576;
    const std::vector<float> x = random.normal(dim, 3.0f);
    const std::vector<float> w = random.normal(dim);
    std::vector<float> out(dim, NAN);
    rmsnorm(x.data(), w.data(), out.data(), dim, 1e-5f);
    const std::vector<test::Mistake> mistakes = {
        {"x / (mean(x^2) + eps) * w: the square root is missing",
         rmsnorm_formula(x, w, 1e-5, false)},
        {"x / sqrt(sum(x^2) + eps) * w: the sum of squares is not divided by dim",
         rmsnorm_formula(x, w, 1e-5, true, false)},
        {"x / sqrt(mean(x^2) + eps): the weight is never applied",
         rmsnorm_formula(x, w, 1e-5, true, true, false)}};
    const std::vector<float> expected = rmsnorm_formula(x, w, 1e-5);
    EXPECT_TRUE(test::equal_or_explain("rmsnorm(x, w) = x / sqrt(mean(x^2) + eps) * w", out,
                                       expected, 1e-5, mistakes));
}

// Every read and write of x, weight and out stays inside their dim elements:
// the arrays end at an inaccessible page, so a loop that runs one element too
// far stops this test with SIGSEGV.
TEST(RmsNorm, ReadsAndWritesOnlyTheDimElementsOfItsRow) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t dim = 64;
    test::GuardedArray<float> x(random.normal(dim)), w(random.normal(dim)), out(dim);
    rmsnorm(x.data(), w.data(), out.data(), dim, 1e-6f);
    EXPECT_TRUE(test::equal_or_explain("rmsnorm over a guarded row", out.to_vector(),
                                       rmsnorm_formula(x.to_vector(), w.to_vector(), 1e-6), 1e-5));
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

// Rotates pair i of each head, (x[first(i)], x[second(i)]), by position * base^(-2i/rope_dim).
std::vector<float> rope_formula(const std::vector<float>& x, int64_t heads, int64_t position,
                                const RopeParams& p, int64_t (*first)(int64_t, int64_t),
                                int64_t (*second)(int64_t, int64_t), int64_t position_shift = 0) {
    // Pair after pair, in place, as a kernel would: where pairs overlap (a
    // mistake), a later pair turns values an earlier one already turned.
    std::vector<float> out = x;
    for (int64_t h = 0; h < heads; ++h) {
        float* head = out.data() + h * p.head_dim;
        for (int64_t i = 0; i < p.rope_dim / 2; ++i) {
            const double angle = double(position + position_shift) *
                                 std::pow(double(p.freq_base), -2.0 * double(i) / p.rope_dim);
            const int64_t a = first(i, p.rope_dim), b = second(i, p.rope_dim);
            const double x0 = head[a], x1 = head[b];
            head[a] = float(x0 * std::cos(angle) - x1 * std::sin(angle));
            head[b] = float(x0 * std::sin(angle) + x1 * std::cos(angle));
        }
    }
    return out;
}

TEST(Rope, RotatesAdjacentPairsByPositionAngle) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const RopeParams params{16, 12, 10000.0f};  // last 4 dims of each head not rotated
    const int64_t heads = 3, position = random.integer(1, 5000);
    std::vector<float> x = random.normal(heads * 16);
    const std::vector<float> original = x;
    rope_apply(x.data(), heads, position, params);
    const auto adjacent_first = [](int64_t i, int64_t) { return 2 * i; };
    const auto adjacent_second = [](int64_t i, int64_t) { return 2 * i + 1; };
    const auto halves_first = [](int64_t i, int64_t) { return i; };
    const auto halves_second = [](int64_t i, int64_t rope_dim) { return i + rope_dim / 2; };
    const auto neighbour_second = [](int64_t i, int64_t) { return i + 1; };
    const std::vector<float> expected =
        rope_formula(original, heads, position, params, adjacent_first, adjacent_second);
    const std::vector<test::Mistake> mistakes = {
        {"rotating dimensions (i, i+1) for pair i: the pairs overlap; pair i is (2i, 2i+1)",
         rope_formula(original, heads, position, params, halves_first, neighbour_second)},
        {"rotating (i, i + rope_dim/2), the NeoX layout; llama pairs adjacent dimensions",
         rope_formula(original, heads, position, params, halves_first, halves_second)},
        {"the angle of position + 1: positions count from 0",
         rope_formula(original, heads, position, params, adjacent_first, adjacent_second, 1)},
        {"the angle of position - 1: positions count from 0",
         rope_formula(original, heads, position, params, adjacent_first, adjacent_second, -1)}};
    EXPECT_TRUE(test::equal_or_explain(
        "rope_apply: pair i = (x[2i], x[2i+1]) turned by position * base^(-2i/rope_dim)", x,
        expected, 1e-4, mistakes));
    for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 12; d < 16; ++d) {
            EXPECT_EQ(x[h * 16 + d], original[h * 16 + d])
                << "head " << h << " dimension " << d << " is past rope_dim 12: it must stay";
        }
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
    std::vector<float> expected(100), sigmoid_only(100), swapped(100), relu(100);
    for (int i = 0; i < 100; ++i) {
        const double g = gate[i], u = up[i];
        expected[i] = float(g / (1 + std::exp(-g)) * u);
        sigmoid_only[i] = float(1 / (1 + std::exp(-g)) * u);
        swapped[i] = float(u / (1 + std::exp(-u)) * g);
        relu[i] = float(std::max(g, 0.0) * u);
    }
    const std::vector<test::Mistake> mistakes = {
        {"sigmoid(gate) * up: silu(g) is g * sigmoid(g), the gate times its sigmoid",
         sigmoid_only},
        {"silu(up) * gate: the activation goes on the gate", swapped},
        {"relu(gate) * up: the activation is silu", relu}};
    EXPECT_TRUE(test::equal_or_explain("swiglu(gate, up) = silu(gate) * up", out, expected, 1e-5,
                                       mistakes));
}

// The three arrays end at an inaccessible page: a loop that runs one element
// too far stops this test with SIGSEGV.
TEST(SwiGlu, ReadsAndWritesOnlyItsNElements) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const int64_t n = 37;
    test::GuardedArray<float> gate(random.normal(n)), up(random.normal(n)), out(n);
    swiglu(gate.data(), up.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_NEAR(out[i], gate[i] / (1 + std::exp(-double(gate[i]))) * up[i], 1e-5) << i;
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
// with the KV heads explicitly repeated for every query head. The options
// give what common mistakes compute instead.
struct AttentionVariant {
    bool causal = true;            // query t sees keys up to its own position only
    bool scaled = true;            // scores times 1/sqrt(head_dim)
    bool grouped = true;           // query head h reads KV head h / group (else h % kv heads)
};

std::vector<float> attention_formula(const std::vector<float>& q, const std::vector<float>& k,
                                     const std::vector<float>& v, const AttentionShape& s,
                                     AttentionVariant variant = {}) {
    std::vector<float> out(s.num_queries * s.num_heads * s.head_dim);
    const int64_t group = s.num_heads / s.num_kv_heads;
    for (int64_t t = 0; t < s.num_queries; ++t) {
        const int64_t pos = variant.causal ? s.num_keys - s.num_queries + t : s.num_keys - 1;
        for (int64_t h = 0; h < s.num_heads; ++h) {
            const int64_t kv = variant.grouped ? h / group : h % s.num_kv_heads;
            std::vector<double> p(pos + 1);
            double max_score = -1e300, sum = 0;
            for (int64_t j = 0; j <= pos; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < s.head_dim; ++d) {
                    dot += double(q[(t * s.num_heads + h) * s.head_dim + d]) *
                           k[(j * s.num_kv_heads + kv) * s.head_dim + d];
                }
                p[j] = variant.scaled ? dot / std::sqrt(double(s.head_dim)) : dot;
                max_score = std::max(max_score, p[j]);
            }
            for (double& x : p) sum += (x = std::exp(x - max_score));
            for (int64_t d = 0; d < s.head_dim; ++d) {
                double acc = 0;
                for (int64_t j = 0; j <= pos; ++j) {
                    acc += p[j] / sum * v[(j * s.num_kv_heads + kv) * s.head_dim + d];
                }
                out[(t * s.num_heads + h) * s.head_dim + d] = float(acc);
            }
        }
    }
    return out;
}

// The output against the formula, naming the mistake the output matches.
::testing::AssertionResult attention_is_right(const std::vector<float>& out,
                                              const std::vector<float>& q,
                                              const std::vector<float>& k,
                                              const std::vector<float>& v,
                                              const AttentionShape& s) {
    std::ostringstream what;
    what << "attention over " << s.num_queries << " queries and " << s.num_keys << " keys, "
         << s.num_heads << " heads on " << s.num_kv_heads << " KV heads";
    std::vector<test::Mistake> mistakes;
    if (s.num_queries > 1) {
        mistakes.push_back({"no causal mask: query t must not see the keys after its own "
                            "position (num_keys - num_queries + t)",
                            attention_formula(q, k, v, s, {.causal = false})});
    }
    mistakes.push_back({"scores not scaled by 1/sqrt(head_dim)",
                        attention_formula(q, k, v, s, {.scaled = false})});
    if (s.num_kv_heads > 1 && s.num_kv_heads < s.num_heads) {
        mistakes.push_back({"query head h reads KV head h % num_kv_heads; consecutive query "
                            "heads share a KV head: h / (num_heads / num_kv_heads)",
                            attention_formula(q, k, v, s, {.grouped = false})});
    }
    return test::equal_or_explain(what.str(), out, attention_formula(q, k, v, s), 1e-5, mistakes);
}

TEST(Attention, CausalGqaMatchesFormulaForSeveralHeadRatios) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    // (heads, kv heads): MHA, GQA 2:1 and 3:1, MQA.
    for (auto [heads, kv_heads] : {std::pair{4, 4}, {4, 2}, {9, 3}, {6, 1}}) {
        const int64_t tokens = random.integer(2, 9);
        const AttentionShape shape{tokens, tokens, heads, kv_heads, 8};
        const auto q = random.normal(shape.num_queries * heads * 8);
        const auto k = random.normal(shape.num_keys * kv_heads * 8);
        const auto v = random.normal(shape.num_keys * kv_heads * 8);
        std::vector<float> out(q.size(), NAN);
        attention_causal(q.data(), k.data(), v.data(), out.data(), shape);
        EXPECT_TRUE(attention_is_right(out, q, k, v, shape));
    }
}

// q, k, v and out end at an inaccessible page: a loop that runs one element
// (or one head) too far stops this test with SIGSEGV.
TEST(Attention, ReadsAndWritesOnlyInsideItsArrays) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const AttentionShape shape{3, 5, 4, 2, 8};
    test::GuardedArray<float> q(random.normal(3 * 4 * 8)), k(random.normal(5 * 2 * 8)),
        v(random.normal(5 * 2 * 8)), out(3 * 4 * 8);
    attention_causal(q.data(), k.data(), v.data(), out.data(), shape);
    EXPECT_TRUE(attention_is_right(out.to_vector(), q.to_vector(), k.to_vector(), v.to_vector(),
                                   shape));
}

TEST(Attention, QueriesAfterCachedKeysSeeEarlierKeys) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const AttentionShape shape{3, 10, 4, 2, 16};  // 3 new tokens after 7 earlier ones
    const auto q = random.normal(3 * 4 * 16);
    const auto k = random.normal(10 * 2 * 16), v = random.normal(10 * 2 * 16);
    std::vector<float> out(q.size(), NAN);
    attention_causal(q.data(), k.data(), v.data(), out.data(), shape);
    EXPECT_TRUE(attention_is_right(out, q, k, v, shape));
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
