// fused_kernels_test.cpp — each fused kernel against the plain kernels it merges.
//
// Chapter 11.7 (kernel fusion; docs/kernel_fusion.md). Every fused kernel
// does the same arithmetic as its unfused sequence, in the same order and
// precision (the double sum of squares of rmsnorm, the double angles of
// rope, the same int8 block quantizer and group kernel), so the tolerance
// is zero: outputs must be bit-equal. A difference means a fusion changed
// the numbers, which it must not: the numpy oracle and every golden test
// hold the unfused path. Inputs are fresh random draws (SERVELAB_TEST_SEED
// repeats one); outputs are poisoned with NaN first, so an entry a kernel
// forgets to write fails. Shapes: SmolLM2-135M's (dim 576, hidden 1536, 9
// query heads and 3 KV heads of 64), small odd ones, 1 and many tokens.
//
// Also: the fusion plan (which fusions a binary may take, by which exercise
// files it links in their reference version), and whole tiny models giving
// the same logits with every fusion on and with none.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string_view>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/fused_add_rmsnorm.h"
#include "kernels/cpu/fused_gate_up_swiglu.h"
#include "kernels/cpu/fused_qkv_rope.h"
#include "kernels/cpu/fused_rmsnorm_quantize.h"
#include "kernels/cpu/quant_matmul_repacked.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "reference/common/exercise_files.h"
#include "reference/engine/fusion_plan.h"
#include "reference/engine/model_runner.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

// Bit-equality of two float arrays (NaN poison left in either fails too).
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_FALSE(std::isnan(got[i])) << what << ": entry " << i << " never written";
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << what << ": entry " << i << " is " << got[i] << ", unfused " << want[i];
    }
}

void expect_same_activations(const QuantizedActivations& got, const QuantizedActivations& want) {
    ASSERT_EQ(got.num_tokens, want.num_tokens);
    ASSERT_EQ(got.cols, want.cols);
    ASSERT_EQ(got.codes, want.codes) << "int8 codes";
    expect_same_bits(got.scales, want.scales, "block scales");
    expect_same_bits(got.scaled_sums, want.scaled_sums, "block scaled sums");
}

// Buffers grown by a kernel start as NaN (codes as a value quantization never gives).
void poison(QuantizedActivations& a, int64_t num_tokens, int64_t cols) {
    a.codes.assign(size_t(num_tokens * cols), int8_t(-128));
    a.scales.assign(size_t(num_tokens * cols / 32), kPoison);
    a.scaled_sums.assign(size_t(num_tokens * cols / 32), kPoison);
}

struct RowsShape {
    int64_t num_tokens;
    int64_t dim;
};

// SmolLM2's width at 1, 7 and 512 tokens, and narrow odd ones.
const RowsShape kQuantizedRowShapes[] = {{1, 576}, {7, 576}, {512, 576}, {3, 32}, {5, 160}};

TEST(FusedKernels, RmsnormQuantizeEqualsRmsnormThenQuantize) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    for (const RowsShape s : kQuantizedRowShapes) {
        SCOPED_TRACE(testing::Message() << s.num_tokens << " tokens of " << s.dim);
        const std::vector<float> x = random.normal(size_t(s.num_tokens * s.dim), 3.0f);
        const std::vector<float> weight = random.uniform(size_t(s.dim), 0.5f, 1.5f);
        std::vector<float> normed(x.size(), kPoison);
        rmsnorm_rows(x.data(), weight.data(), normed.data(), s.num_tokens, s.dim, 1e-5f);
        QuantizedActivations want, got;
        quantize_activations(normed.data(), s.num_tokens, s.dim, want);
        poison(got, s.num_tokens, s.dim);
        rmsnorm_quantize_rows(x.data(), weight.data(), s.num_tokens, s.dim, 1e-5f, got);
        expect_same_activations(got, want);
    }
}

TEST(FusedKernels, AddRmsnormEqualsAddThenRmsnorm) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    // Any width: this one has no int8 blocks (1, 77: odd ones; 1536: SmolLM2's hidden).
    const RowsShape shapes[] = {{1, 576}, {9, 576}, {512, 576}, {4, 1}, {3, 77}, {2, 1536}};
    for (const RowsShape s : shapes) {
        SCOPED_TRACE(testing::Message() << s.num_tokens << " tokens of " << s.dim);
        const std::vector<float> x = random.normal(size_t(s.num_tokens * s.dim));
        const std::vector<float> delta = random.normal(x.size(), 0.5f);
        const std::vector<float> weight = random.uniform(size_t(s.dim), 0.5f, 1.5f);
        std::vector<float> want_x = x, want_normed(x.size(), kPoison);
        add_inplace(want_x.data(), delta.data(), int64_t(x.size()));
        rmsnorm_rows(want_x.data(), weight.data(), want_normed.data(), s.num_tokens, s.dim, 1e-6f);
        std::vector<float> got_x = x, got_normed(x.size(), kPoison);
        add_rmsnorm_rows(got_x.data(), delta.data(), weight.data(), got_normed.data(), s.num_tokens,
                         s.dim, 1e-6f);
        expect_same_bits(got_x, want_x, "residual stream");
        expect_same_bits(got_normed, want_normed, "normed rows");
    }
}

TEST(FusedKernels, AddRmsnormQuantizeEqualsAddThenRmsnormThenQuantize) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    for (const RowsShape s : kQuantizedRowShapes) {
        SCOPED_TRACE(testing::Message() << s.num_tokens << " tokens of " << s.dim);
        const std::vector<float> x = random.normal(size_t(s.num_tokens * s.dim));
        const std::vector<float> delta = random.normal(x.size(), 0.5f);
        const std::vector<float> weight = random.uniform(size_t(s.dim), 0.5f, 1.5f);
        std::vector<float> want_x = x, normed(x.size(), kPoison);
        add_inplace(want_x.data(), delta.data(), int64_t(x.size()));
        rmsnorm_rows(want_x.data(), weight.data(), normed.data(), s.num_tokens, s.dim, 1e-5f);
        QuantizedActivations want, got;
        quantize_activations(normed.data(), s.num_tokens, s.dim, want);
        std::vector<float> got_x = x;
        poison(got, s.num_tokens, s.dim);
        add_rmsnorm_quantize_rows(got_x.data(), delta.data(), weight.data(), s.num_tokens, s.dim,
                                  1e-5f, got);
        expect_same_bits(got_x, want_x, "residual stream");
        expect_same_activations(got, want);
    }
}

void put_fp16(uint8_t* p, float value) {
    const uint16_t h = float_to_fp16(value);
    p[0] = uint8_t(h & 0xFF);
    p[1] = uint8_t(h >> 8);
}

// A (rows, cols) matrix of Q4_0, Q4_1 or Q8_0 blocks with random codes and
// scales, repacked; `gguf` keeps the GGUF bytes it was repacked from.
struct RandomRepacked {
    std::vector<uint8_t> gguf;
    std::vector<uint8_t> repacked;
    RepackedMatrix view;
};

RandomRepacked random_repacked(test::RandomSource& random, GgmlType type, int64_t rows,
                               int64_t cols) {
    const GgmlTypeTraits traits = ggml_type_traits(type);
    RandomRepacked m;
    m.gguf.resize(size_t(rows * row_size_bytes(type, cols)));
    for (uint8_t& b : m.gguf) b = uint8_t(random.integer(0, 255));
    for (int64_t i = 0; i < rows * cols / traits.block_elems; ++i) {
        uint8_t* block = m.gguf.data() + i * traits.block_bytes;
        put_fp16(block, random.uniform(1, 0.002f, 0.05f)[0]);
        if (type == GgmlType::kQ4_1) put_fp16(block + 2, random.uniform(1, -0.2f, 0.2f)[0]);
    }
    m.repacked = repack_rows({type, m.gguf.data(), rows, cols, row_size_bytes(type, cols)});
    m.view = {type, m.repacked.data(), rows, cols};
    return m;
}

const GgmlType kRepackedTypes[] = {GgmlType::kQ4_1, GgmlType::kQ4_0, GgmlType::kQ8_0};

struct AttentionShape {
    int64_t num_tokens, dim, num_heads, num_kv_heads, head_dim, rope_dim;
};

TEST(FusedKernels, QkvMatmulRopeEqualsMatmulThenRope) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    const AttentionShape shapes[] = {
        {1, 576, 9, 3, 64, 64},    // SmolLM2, decode
        {13, 576, 9, 3, 64, 64},   // SmolLM2, a short chunk (every token tile, a remainder)
        {512, 576, 9, 3, 64, 64},  // SmolLM2, a prefill chunk
        {3, 96, 3, 1, 32, 16},     // partial rotary: pairs past rope_dim stay
        {2, 64, 1, 1, 16, 16},     // one head of 16: a group is exactly a head
    };
    for (const GgmlType type : kRepackedTypes) {
        for (const AttentionShape s : shapes) {
            SCOPED_TRACE(testing::Message()
                         << ggml_type_traits(type).name << ", " << s.num_tokens << " tokens, "
                         << s.num_heads << "/" << s.num_kv_heads << " heads of " << s.head_dim);
            const RandomRepacked wq =
                random_repacked(random, type, s.num_heads * s.head_dim, s.dim);
            const RandomRepacked wk =
                random_repacked(random, type, s.num_kv_heads * s.head_dim, s.dim);
            const RandomRepacked wv =
                random_repacked(random, type, s.num_kv_heads * s.head_dim, s.dim);
            QuantizedActivations x;
            const std::vector<float> input = random.normal(size_t(s.num_tokens * s.dim));
            quantize_activations(input.data(), s.num_tokens, s.dim, x);
            std::vector<int64_t> positions(size_t(s.num_tokens));
            const int64_t start = random.integer(0, 4000);
            for (int64_t t = 0; t < s.num_tokens; ++t) positions[size_t(t)] = start + t;
            const RopeParams rope{s.head_dim, s.rope_dim, 10000.0f};

            const auto filled = [&](int64_t rows) {
                return std::vector<float>(size_t(s.num_tokens * rows), kPoison);
            };
            std::vector<float> want_q = filled(wq.view.rows), want_k = filled(wk.view.rows),
                               want_v = filled(wv.view.rows);
            quant_matmul_repacked(x, wq.view, want_q.data());
            quant_matmul_repacked(x, wk.view, want_k.data());
            quant_matmul_repacked(x, wv.view, want_v.data());
            rope_apply_rows(want_q.data(), positions.data(), s.num_tokens, s.num_heads, rope);
            rope_apply_rows(want_k.data(), positions.data(), s.num_tokens, s.num_kv_heads, rope);

            RopeTable table;
            fill_rope_table(positions.data(), s.num_tokens, rope, table);
            std::vector<float> q = filled(wq.view.rows), k = filled(wk.view.rows),
                               v = filled(wv.view.rows);
            qkv_matmul_rope(x, wq.view, wk.view, wv.view, q.data(), k.data(), v.data(), rope,
                            table);
            expect_same_bits(q, want_q, "q");
            expect_same_bits(k, want_k, "k");
            expect_same_bits(v, want_v, "v");
        }
    }
}

TEST(FusedKernels, GateUpSwigluEqualsMatmulsThenSwiglu) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    struct MlpShape {
        int64_t num_tokens, dim, ffn_dim;
    };
    const MlpShape shapes[] = {
        {1, 576, 1536}, {9, 576, 1536}, {512, 576, 1536}, {3, 96, 48}, {1, 32, 16}};
    for (const GgmlType type : kRepackedTypes) {
        for (const MlpShape s : shapes) {
            SCOPED_TRACE(testing::Message() << ggml_type_traits(type).name << ", " << s.num_tokens
                                            << " tokens, " << s.dim << " -> " << s.ffn_dim);
            const RandomRepacked gate = random_repacked(random, type, s.ffn_dim, s.dim);
            const RandomRepacked up = random_repacked(random, type, s.ffn_dim, s.dim);
            QuantizedActivations x;
            const std::vector<float> input = random.normal(size_t(s.num_tokens * s.dim));
            quantize_activations(input.data(), s.num_tokens, s.dim, x);
            const size_t n = size_t(s.num_tokens * s.ffn_dim);
            std::vector<float> want(n, kPoison), up_out(n, kPoison);
            quant_matmul_repacked(x, gate.view, want.data());
            quant_matmul_repacked(x, up.view, up_out.data());
            swiglu(want.data(), up_out.data(), want.data(), int64_t(n));
            std::vector<float> got(n, kPoison);
            gate_up_matmul_swiglu(x, gate.view, up.view, got.data());
            expect_same_bits(got, want, "silu(gate) * up");
        }
    }
}

// ---------------------------------------------------------------- the plan

TEST(FusionPlan, ThisBinaryLinksEveryReferenceKernelSoEveryFusionIsPlanned) {
    // servelab_tests links the reference engine: every exercise file registered.
    for (const std::string_view path :
         {"kernels/cpu/rmsnorm.cpp", "kernels/cpu/rope.cpp", "kernels/cpu/swiglu.cpp"}) {
        EXPECT_TRUE(reference_exercise_file_linked(path)) << path;
    }
    EXPECT_FALSE(reference_exercise_file_linked("kernels/cpu/residual.cpp"))
        << "not an exercise file: nothing registers it";
    EXPECT_EQ(plan_fusions(true, reference_exercise_file_linked), all_fusions());
}

TEST(FusionPlan, AReplacedExerciseFileTurnsOffEveryFusionThatBypassesIt) {
    const auto all_but = [](std::string_view replaced) {
        return [replaced](std::string_view path) { return path != replaced; };
    };
    FusionPlan want = all_fusions();
    want.rmsnorm_quantize = want.add_rmsnorm = false;
    EXPECT_EQ(plan_fusions(true, all_but("kernels/cpu/rmsnorm.cpp")), want)
        << "a student's rmsnorm: both fusions that contain an rmsnorm stay off";
    want = all_fusions();
    want.rope_in_qkv = false;
    EXPECT_EQ(plan_fusions(true, all_but("kernels/cpu/rope.cpp")), want);
    want = all_fusions();
    want.swiglu_in_gate_up = false;
    EXPECT_EQ(plan_fusions(true, all_but("kernels/cpu/swiglu.cpp")), want);
    // Lab 1 replaces all three: the engine runs its plain kernels only.
    EXPECT_EQ(plan_fusions(true, [](std::string_view) { return false; }), FusionPlan{});
    EXPECT_EQ(describe(FusionPlan{}), "none");
}

TEST(FusionPlan, NotRequestedMeansNoFusionWhateverIsLinked) {
    EXPECT_EQ(plan_fusions(false, [](std::string_view) { return true; }), FusionPlan{});
}

TEST(FusionPlan, RunnerFollowsItsFusedKernelsOptionWhenBuilt) {
    const TinyModelOptions options;
    const Model model = Model::from_gguf(GgufFile::parse(make_tiny_model(options)));
    // Built side by side in one process: each runner follows its own option.
    const ModelRunner unfused(model.config, model.weights, {.fused_kernels = false});
    const ModelRunner fused(model.config, model.weights, {.fused_kernels = true});
    const ModelRunner by_default(model.config, model.weights);
    EXPECT_EQ(unfused.fusions(), FusionPlan{}) << "--no-fused-kernels";
    EXPECT_EQ(fused.fusions(), all_fusions());
    EXPECT_EQ(by_default.fusions(), all_fusions()) << "the default";
    EXPECT_EQ(plan_fusions(false), FusionPlan{});
    EXPECT_EQ(plan_fusions(true), all_fusions());
    // One rank of a split model takes the same option.
    SoloCommunicator solo;
    const TensorParallelShard whole = plan_shard(model.config, 1, 0);
    const ModelRunner rank(model.config, model.weights, whole, solo, {.fused_kernels = false});
    EXPECT_EQ(rank.fusions(), FusionPlan{}) << "--no-fused-kernels with --tp";
    EXPECT_FALSE(rank.options().fused_kernels);
}

// ---------------------------------------------------------------- whole models

struct TinyCase {
    GgmlType weight_type;
    MatmulMode mode;
    int64_t dim, num_heads, num_kv_heads, ffn_dim;
};

class FusedForwardTest : public ::testing::TestWithParam<TinyCase> {};

// Prefill of a prompt, then decode steps on a contiguous cache, and a
// no-cache pass: every logit the same bits with every fusion on and off.
TEST_P(FusedForwardTest, LogitsAreTheSameFusedAndUnfused) {
    const TinyCase c = GetParam();
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    TinyModelOptions options;
    options.seed = random.seed();
    options.weight_type = c.weight_type;
    options.dim = c.dim;
    options.num_heads = c.num_heads;
    options.num_kv_heads = c.num_kv_heads;
    options.ffn_dim = c.ffn_dim;
    Model model = Model::from_gguf(GgufFile::parse(make_tiny_model(options)));
    model.weights.set_matmul_mode(c.mode);
    ModelRunner fused(model.config, model.weights), unfused(model.config, model.weights);
    fused.set_fusions(all_fusions());
    unfused.set_fusions(FusionPlan{});
    ASSERT_EQ(fused.fusions(), all_fusions());

    std::vector<TokenId> prompt;
    for (int i = 0; i < 19; ++i) {
        prompt.push_back(TokenId(random.integer(0, model.config.vocab_size - 1)));
    }
    const StepInput whole{
        .tokens = prompt, .start_position = 0, .logits_for = LogitsFor::kAllTokens};
    expect_same_bits(fused.forward(whole), unfused.forward(whole), "no-cache logits");

    KvCache fused_cache(model.config, 64), unfused_cache(model.config, 64);
    const StepInput prefill{.tokens = prompt, .start_position = 0};
    expect_same_bits(fused.forward(prefill, &fused_cache), unfused.forward(prefill, &unfused_cache),
                     "prefill logits");
    for (int step = 0; step < 4; ++step) {
        const std::vector<TokenId> token = {
            TokenId(random.integer(0, model.config.vocab_size - 1))};
        const StepInput decode{.tokens = token, .start_position = fused_cache.num_tokens()};
        expect_same_bits(fused.forward(decode, &fused_cache),
                         unfused.forward(decode, &unfused_cache), "decode logits");
    }
}

INSTANTIATE_TEST_SUITE_P(
    WeightTypesAndModes, FusedForwardTest,
    ::testing::Values(TinyCase{GgmlType::kQ4_1, MatmulMode::kFast, 64, 4, 2, 128},
                      TinyCase{GgmlType::kQ4_1, MatmulMode::kExact, 64, 4, 2, 128},
                      TinyCase{GgmlType::kQ4_0, MatmulMode::kFast, 128, 2, 1, 96},
                      TinyCase{GgmlType::kQ8_0, MatmulMode::kFast, 64, 4, 2, 128},
                      TinyCase{GgmlType::kF32, MatmulMode::kFast, 64, 4, 2, 128}),
    [](const auto& info) {
        return std::string(ggml_type_traits(info.param.weight_type).name) +
               (info.param.mode == MatmulMode::kFast ? "_fast" : "_exact") + "_dim" +
               std::to_string(info.param.dim);
    });

}  // namespace
}  // namespace servelab
