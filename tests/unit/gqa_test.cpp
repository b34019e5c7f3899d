// gqa_test.cpp — Lab 3: MHA, GQA and MQA are one attention path.
//
// GQA with num_kv_heads KV heads must compute exactly what MHA computes when
// each KV head is copied to the query heads that share it. The tests build
// that MHA twin explicitly — for kernels and for whole random models — and
// compare, for head ratios from MHA (1:1) to MQA (n:1).
#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/head_mapping.h"
#include "reference/engine/model_runner.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

// (num_heads, num_kv_heads): MHA, GQA 2:1, 3:1, 4:1, 8:1 and MQA.
const std::vector<std::pair<int64_t, int64_t>> kHeadRatios = {{4, 4}, {8, 4}, {6, 2},
                                                              {8, 2}, {8, 1}, {5, 1}};

TEST(HeadMapping, GroupsConsecutiveQueryHeads) {
    // (num_heads, num_kv_heads): MHA, MQA, SmolLM2 (9 on 3), 8 on 2, Llama-3-8B (32 on 8).
    for (auto [heads, kv_heads] : std::vector<std::pair<int64_t, int64_t>>{
             {8, 8}, {8, 1}, {9, 3}, {8, 2}, {32, 8}}) {
        bool interleaved = true;
        for (int64_t h = 0; h < heads; ++h) {
            interleaved &= kv_head_for_query_head(h, heads, kv_heads) == h % kv_heads;
        }
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t expected = h / (heads / kv_heads);
            EXPECT_EQ(kv_head_for_query_head(h, heads, kv_heads), expected)
                << "query head " << h << " of " << heads << " on " << kv_heads << " KV heads"
                << (interleaved ? ": the query heads are dealt out over the KV heads "
                                  "(h % num_kv_heads), but consecutive query heads share one KV "
                                  "head: h / (num_heads / num_kv_heads)"
                                : "");
        }
    }
}

// (num_tokens, num_kv_heads, head_dim) → (num_tokens, num_heads, head_dim),
// query head h getting KV head h / (num_heads / num_kv_heads).
std::vector<float> repeat_kv_heads(const std::vector<float>& kv, int64_t num_tokens,
                                   int64_t num_heads, int64_t num_kv_heads, int64_t head_dim) {
    const int64_t group = num_heads / num_kv_heads;
    std::vector<float> repeated(size_t(num_tokens * num_heads * head_dim));
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t h = 0; h < num_heads; ++h) {
            const float* from = kv.data() + (t * num_kv_heads + h / group) * head_dim;
            std::copy(from, from + head_dim, repeated.data() + (t * num_heads + h) * head_dim);
        }
    }
    return repeated;
}

KvView f32_view(const std::vector<float>& rows, int64_t num_heads, int64_t head_dim) {
    return KvView{.dtype = KvDtype::kF32,
                  .data = reinterpret_cast<const uint8_t*>(rows.data()),
                  .num_heads = num_heads,
                  .head_dim = head_dim};
}

TEST(Gqa, KernelsEqualMhaWithRepeatedKvHeads) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (auto [heads, kv_heads] : kHeadRatios) {
        const int64_t head_dim = 16;
        const int64_t num_keys = random.integer(2, 40);
        const int64_t num_queries = random.integer(1, num_keys);
        const auto q = random.normal(size_t(num_queries * heads * head_dim));
        const auto k = random.normal(size_t(num_keys * kv_heads * head_dim));
        const auto v = random.normal(size_t(num_keys * kv_heads * head_dim));
        const auto k_mha = repeat_kv_heads(k, num_keys, heads, kv_heads, head_dim);
        const auto v_mha = repeat_kv_heads(v, num_keys, heads, kv_heads, head_dim);

        const size_t out_size = size_t(num_queries * heads * head_dim);
        std::vector<float> mha(out_size, NAN), gqa(out_size, NAN), gqa_cached(out_size, NAN);
        attention_causal(q.data(), k_mha.data(), v_mha.data(), mha.data(),
                         {num_queries, num_keys, heads, heads, head_dim});
        const AttentionShape shape{num_queries, num_keys, heads, kv_heads, head_dim};
        attention_causal(q.data(), k.data(), v.data(), gqa.data(), shape);
        attention_over_kv(q.data(), f32_view(k, kv_heads, head_dim),
                          f32_view(v, kv_heads, head_dim), gqa_cached.data(), shape);
        EXPECT_LE(test::max_relative_error(gqa, mha), 1e-6f) << heads << ":" << kv_heads;
        EXPECT_LE(test::max_relative_error(gqa_cached, mha), 1e-6f) << heads << ":" << kv_heads;
    }
}

// The MHA twin of a GQA model: every KV head's rows of wk and wv copied to
// each query head of its group. Same function, num_heads KV heads.
std::pair<ModelConfig, ModelWeights> mha_twin(const Model& gqa) {
    ModelConfig config = gqa.config;
    ModelWeights weights = gqa.weights;
    const int64_t dim = config.dim, head_dim = config.head_dim;
    config.num_kv_heads = config.num_heads;
    for (LayerWeights& layer : weights.layers) {
        // A (kv_heads*head_dim, dim) matrix is (kv_heads, head_dim*dim) token-free rows.
        for (WeightMatrix* w : {&layer.wk, &layer.wv}) {
            *w = WeightMatrix::from_floats(repeat_kv_heads(w->to_floats(), 1, config.num_heads,
                                                           gqa.config.num_kv_heads, head_dim * dim),
                                           config.num_heads * head_dim, dim);
        }
    }
    return {config, weights};
}

TEST(Gqa, ModelsEqualTheirMhaTwinWithAndWithoutCache) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (auto [heads, kv_heads] : kHeadRatios) {
        SCOPED_TRACE(testing::Message() << heads << " heads, " << kv_heads << " kv heads");
        auto bytes = make_tiny_model({.seed = random.seed(),
                                      .num_layers = 2,
                                      .dim = heads * 8,
                                      .num_heads = heads,
                                      .num_kv_heads = kv_heads});
        const Model gqa = Model::from_gguf(GgufFile::parse(bytes));
        const auto [mha_config, mha_weights] = mha_twin(gqa);

        std::vector<TokenId> tokens(size_t(random.integer(2, 24)));
        for (TokenId& t : tokens) t = TokenId(random.integer(0, gqa.config.vocab_size - 1));
        ModelRunner gqa_runner(gqa.config, gqa.weights);
        ModelRunner mha_runner(mha_config, mha_weights);
        const StepInput all{tokens, 0, LogitsFor::kAllTokens};
        const auto mha_logits = mha_runner.forward(all);
        EXPECT_LE(test::max_relative_error(gqa_runner.forward(all), mha_logits), 1e-5f);

        // Decoding token by token through a GQA-sized cache: same logits.
        KvCache cache(gqa.config, int64_t(tokens.size()));
        const int64_t vocab = gqa.config.vocab_size;
        for (size_t t = 0; t < tokens.size(); ++t) {
            const auto step =
                gqa_runner.forward({std::span(tokens).subspan(t, 1), int64_t(t)}, &cache);
            const std::vector<float> expected(mha_logits.begin() + int64_t(t) * vocab,
                                              mha_logits.begin() + int64_t(t + 1) * vocab);
            EXPECT_LE(test::max_relative_error(step, expected), 1e-5f) << "step " << t;
        }
        // ...and the cache is num_heads / num_kv_heads times smaller than the twin's.
        EXPECT_EQ(kv_cache_bytes(mha_config, 100, KvDtype::kF32),
                  kv_cache_bytes(gqa.config, 100, KvDtype::kF32) * (heads / kv_heads));
    }
}

}  // namespace
}  // namespace servelab
