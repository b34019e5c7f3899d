// mla_test.cpp — Lab 3: multi-head latent attention (DeepSeek-V2).
//
// The absorbed form (attention directly over the cached latents) must equal
// the naive form (up-project the latents to per-head keys and values, then
// ordinary attention) within fp32 rounding — as kernels on random data, over
// int8 caches, and as whole random deepseek2 models; and an MLA cache must
// hold only kv_lora_rank + rope_dim numbers per token and layer.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "reference/attention/mla_attention.h"
#include "reference/engine/model_runner.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/gguf_writer.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

TinyModelOptions mla_options(uint64_t seed, int64_t q_lora_rank) {
    return {.seed = seed,
            .num_layers = 2,
            .dim = 48,
            .num_heads = 3,
            .ffn_dim = 64,
            .mla = true,
            .kv_lora_rank = 24,
            .q_lora_rank = q_lora_rank,
            .qk_nope_dim = 12,
            .qk_rope_dim = 8,
            .v_head_dim = 10};
}

TEST(MlaModel, LoaderReadsDeepseek2KeysAndTensors) {
    const auto bytes = make_tiny_model(mla_options(1, 16));
    const GgufFile file = GgufFile::parse(bytes);
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    const ModelConfig& c = model.config;
    EXPECT_EQ(c.architecture, "deepseek2");
    EXPECT_TRUE(c.is_mla());
    EXPECT_EQ(c.kv_lora_rank, 24);
    EXPECT_EQ(c.q_lora_rank, 16);
    EXPECT_EQ(c.qk_nope_dim, 12);
    EXPECT_EQ(c.rope_dim, 8);
    EXPECT_EQ(c.head_dim, 20);
    EXPECT_EQ(c.v_head_dim, 10);
    EXPECT_EQ(model.weights.layers[1].wkv_b.size(), size_t(3 * (12 + 10) * 24));
    EXPECT_TRUE(model.weights.layers[0].wq.empty());
    // Every tensor in the file is counted once.
    int64_t elements = 0;
    for (const GgufTensorInfo& t : file.tensors()) elements += t.num_rows() * t.row_length();
    EXPECT_EQ(count_parameters(c), elements);
    // The cache holds the latent and the RoPE key, nothing per head.
    const KvLayout layout = kv_layout(c);
    EXPECT_EQ(layout.values.elements(), 24);
    EXPECT_EQ(layout.keys.elements(), 8);
    EXPECT_EQ(kv_cache_bytes(c, 10, KvDtype::kF32), 2 * 10 * (24 + 8) * 4);
}

// The tiny MLA model re-written with extra or changed metadata.
std::vector<uint8_t> mla_model_with(const std::function<void(GgufWriter&)>& add,
                                    const std::string& dense_blocks_key = "") {
    const auto original = make_tiny_model(mla_options(1, 0));
    const GgufFile file = GgufFile::parse(original);
    GgufWriter writer;
    for (auto [key, value] : file.metadata()) {
        if (key == dense_blocks_key) value.as_uint = 1;  // only the first block dense
        writer.add_value(key, value);
    }
    add(writer);
    for (const GgufTensorInfo& t : file.tensors()) {
        writer.add_tensor(t.name, t.dims, t.type,
                          std::vector<uint8_t>(t.data, t.data + t.size_bytes));
    }
    return writer.to_bytes();
}

std::string load_error_with(const std::function<void(GgufWriter&)>& add,
                            const std::string& dense_blocks_key = "") {
    const auto bytes = mla_model_with(add, dense_blocks_key);
    return test::error_of([&] { Model::from_gguf(GgufFile::parse(bytes)); });
}

TEST(MlaModel, RefusesWhatItCannotRunByName) {
    EXPECT_NE(load_error_with([](GgufWriter& w) { w.add_uint32("deepseek2.expert_count", 64); },
                              "deepseek2.leading_dense_block_count")
                  .find("1 mixture-of-experts layers (64 experts) are not supported"),
              std::string::npos);
    // Experts declared but every block dense: a dense model, loads.
    const auto dense =
        mla_model_with([](GgufWriter& w) { w.add_uint32("deepseek2.expert_count", 64); });
    EXPECT_NO_THROW(Model::from_gguf(GgufFile::parse(dense)));
    EXPECT_NE(load_error_with([](GgufWriter& w) {
                  w.add_string("deepseek2.rope.scaling.type", "yarn");
              }).find("RoPE scaling 'yarn' is not supported"),
              std::string::npos);
}

// Random queries and a random latent cache, both MLA forms, same output.
TEST(Mla, AbsorbedEqualsNaiveOnRandomData) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 6; ++trial) {
        MlaShape s;
        s.num_keys = random.integer(1, 60);
        s.num_queries = random.integer(1, s.num_keys);
        s.num_heads = random.integer(1, 6);
        s.qk_nope_dim = random.integer(1, 24);
        s.rope_dim = 2 * random.integer(1, 8);
        s.v_head_dim = random.integer(1, 24);
        s.kv_lora_rank = random.integer(1, 48);
        SCOPED_TRACE(testing::Message() << s.num_queries << " queries, " << s.num_keys << " keys, "
                                        << s.num_heads << " heads, d_c " << s.kv_lora_rank);
        const auto q_nope = random.normal(size_t(s.num_queries * s.num_heads * s.qk_nope_dim));
        const auto q_pe = random.normal(size_t(s.num_queries * s.num_heads * s.rope_dim));
        const auto latents = random.normal(size_t(s.num_keys * s.kv_lora_rank));
        const auto rope_keys = random.normal(size_t(s.num_keys * s.rope_dim));
        const auto wkv_b =
            random.normal(size_t(s.num_heads * (s.qk_nope_dim + s.v_head_dim) * s.kv_lora_rank),
                          1.0f / std::sqrt(float(s.kv_lora_rank)));
        const auto view = [](const std::vector<float>& rows, int64_t width) {
            return KvView{.data = reinterpret_cast<const uint8_t*>(rows.data()),
                          .num_heads = 1,
                          .head_dim = width};
        };
        const size_t out_size = size_t(s.num_queries * s.num_heads * s.v_head_dim);
        std::vector<float> naive(out_size, NAN), absorbed(out_size, NAN);
        mla_attention_naive(q_nope.data(), q_pe.data(), view(rope_keys, s.rope_dim),
                            view(latents, s.kv_lora_rank), wkv_b.data(), naive.data(), s);
        mla_attention_absorbed(q_nope.data(), q_pe.data(), view(rope_keys, s.rope_dim),
                               view(latents, s.kv_lora_rank), wkv_b.data(), absorbed.data(), s);
        // What scaling the scores by 1/sqrt(kv_lora_rank + rope_dim) would give:
        // the naive form with every query scaled by the ratio of the two scales.
        const float ratio =
            std::sqrt(float(s.qk_nope_dim + s.rope_dim) / float(s.kv_lora_rank + s.rope_dim));
        std::vector<float> q_nope_scaled = q_nope, q_pe_scaled = q_pe;
        for (float& x : q_nope_scaled) x *= ratio;
        for (float& x : q_pe_scaled) x *= ratio;
        std::vector<float> latent_scaled(out_size, NAN);
        mla_attention_naive(q_nope_scaled.data(), q_pe_scaled.data(), view(rope_keys, s.rope_dim),
                            view(latents, s.kv_lora_rank), wkv_b.data(), latent_scaled.data(), s);
        const double error = test::max_relative_error(absorbed, naive);
        const bool latent_scale = s.kv_lora_rank != s.qk_nope_dim &&
                                  test::max_relative_error(absorbed, latent_scaled) <= 1e-5;
        EXPECT_LE(error, 1e-5) << "absorbed and naive MLA differ"
                               << (latent_scale
                                       ? ": the absorbed scores are scaled by 1/sqrt(kv_lora_rank "
                                         "+ rope_dim), but the scale comes from the key width the "
                                         "model was trained with, qk_nope_dim + rope_dim"
                                       : "");
    }
}

// Every array ends at an inaccessible page: a loop that runs one element (or
// one head) past its end stops this test with SIGSEGV.
TEST(Mla, AbsorbedReadsAndWritesOnlyInsideItsArrays) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    MlaShape s;
    s.num_keys = 5, s.num_queries = 3, s.num_heads = 2, s.qk_nope_dim = 6, s.rope_dim = 4;
    s.v_head_dim = 5, s.kv_lora_rank = 7;
    test::GuardedArray<float> q_nope(random.normal(size_t(3 * 2 * 6))),
        q_pe(random.normal(size_t(3 * 2 * 4))), latents(random.normal(size_t(5 * 7))),
        rope_keys(random.normal(size_t(5 * 4))), wkv_b(random.normal(size_t(2 * (6 + 5) * 7))),
        absorbed(size_t(3 * 2 * 5));
    const auto view = [](const test::GuardedArray<float>& rows, int64_t width) {
        return KvView{.data = reinterpret_cast<const uint8_t*>(rows.data()),
                      .num_heads = 1,
                      .head_dim = width};
    };
    std::vector<float> naive(absorbed.size(), NAN);
    mla_attention_naive(q_nope.data(), q_pe.data(), view(rope_keys, 4), view(latents, 7),
                        wkv_b.data(), naive.data(), s);
    mla_attention_absorbed(q_nope.data(), q_pe.data(), view(rope_keys, 4), view(latents, 7),
                           wkv_b.data(), absorbed.data(), s);
    EXPECT_LE(test::max_relative_error(absorbed.to_vector(), naive), 1e-5);
}

// Whole models: prefill logits and token-by-token decoding, both forms, any
// cache type — the forms agree with each other, and cached decoding agrees
// with recomputation.
TEST(Mla, AbsorbedModelEqualsNaiveModel) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int64_t q_lora_rank : {int64_t(0), int64_t(16)}) {
        SCOPED_TRACE(testing::Message() << "q_lora_rank " << q_lora_rank);
        const auto bytes = make_tiny_model(mla_options(random.seed(), q_lora_rank));
        const Model model = Model::from_gguf(GgufFile::parse(bytes));
        std::vector<TokenId> tokens(size_t(random.integer(2, 30)));
        for (TokenId& t : tokens) t = TokenId(random.integer(0, model.config.vocab_size - 1));

        ModelRunner naive(model.config, model.weights, {.mla_mode = MlaMode::kNaive});
        ModelRunner absorbed(model.config, model.weights, {.mla_mode = MlaMode::kAbsorbed});
        const StepInput all{tokens, 0, LogitsFor::kAllTokens};
        const auto naive_logits = naive.forward(all);
        EXPECT_LE(test::max_relative_error(absorbed.forward(all), naive_logits), 1e-5);

        for (KvDtype dtype : {KvDtype::kF32, KvDtype::kInt8}) {
            KvCache naive_cache(model.config, int64_t(tokens.size()), dtype);
            KvCache absorbed_cache(model.config, int64_t(tokens.size()), dtype);
            const int64_t vocab = model.config.vocab_size;
            for (size_t t = 0; t < tokens.size(); ++t) {
                const StepInput step{std::span(tokens).subspan(t, 1), int64_t(t)};
                const auto from_naive = naive.forward(step, &naive_cache);
                const auto from_absorbed = absorbed.forward(step, &absorbed_cache);
                // With int8 the two runs' fp32 rounding differences can flip a
                // quantization code (one step, ~1% of a row's largest value),
                // so their bound is a quantization-sized one.
                const double bound = dtype == KvDtype::kF32 ? 1e-5 : 2e-2;
                EXPECT_LE(test::max_relative_error(from_absorbed, from_naive), bound)
                    << kv_dtype_name(dtype) << " step " << t;
                if (dtype == KvDtype::kF32) {
                    const std::vector<float> recomputed(
                        naive_logits.begin() + int64_t(t) * vocab,
                        naive_logits.begin() + int64_t(t + 1) * vocab);
                    EXPECT_LE(test::max_relative_error(from_absorbed, recomputed), 1e-5)
                        << "step " << t;
                }
            }
        }
    }
}

}  // namespace
}  // namespace servelab
