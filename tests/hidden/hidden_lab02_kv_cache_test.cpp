// hidden_lab02_kv_cache_test.cpp — Lab 2's hidden tests (chapter 11.3): the cache's
// memory formula, the step plan, the cache's rows and cached attention on inputs the
// public tests do not use (every dtype, odd layer and head counts, MLA's layout,
// every cache fill level, steps of uneven sizes, a GQA ratio of 3, a cache that is
// exactly full).
//
// The instructor's hidden tests: tools/labkit/student_release.py leaves this file out of
// the student release, so never quote it in a handout. They check the contracts the
// handout states, so a solution tuned to the public tests' shapes fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "reference/attention/cached_attention.h"
#include "reference/engine/generator.h"
#include "reference/engine/step_plan.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"

namespace servelab {
namespace {

using test::RandomSource;

// A multi-head config with the sizes the tests choose.
ModelConfig config_with(int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim) {
    ModelConfig c;
    c.num_layers = layers, c.num_heads = heads, c.num_kv_heads = kv_heads;
    c.head_dim = head_dim, c.v_head_dim = head_dim, c.rope_dim = head_dim;
    c.dim = heads * head_dim, c.context_length = 4096;
    return c;
}

// The bytes of one element, from the formats' definitions (fp32 4; fp16 and
// bf16 2; int8 and fp8 1), written here rather than read from the engine's
// kv_dtype_bytes so that the formula is checked against a table of its own.
int64_t element_bytes(KvDtype dtype) {
    const bool four_bytes = dtype == KvDtype::kF32;
    const bool two_bytes = dtype == KvDtype::kF16 || dtype == KvDtype::kBF16;
    return four_bytes ? 4 : two_bytes ? 2 : 1;
}

// ---------------------------------------------------------------- kv_cache_bytes

// The formula on odd layer and head counts, for every dtype and for one, a few
// and thousands of tokens: K and V, each element of its dtype, plus one fp32
// scale per (token, layer, KV head) for K and for V when the dtype has scales.
TEST(HiddenLab02Bytes, FollowTheFormulaForEveryDtypeAndOddShapes) {
    for (const KvDtype dtype :
         {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kFp8E4M3}) {
        const bool scaled = dtype == KvDtype::kInt8 || dtype == KvDtype::kFp8E4M3;
        for (const auto& [layers, kv_heads, head_dim] :
             {std::tuple{7, 5, 24}, std::tuple{1, 1, 96}, std::tuple{13, 3, 40}}) {
            const ModelConfig c = config_with(layers, kv_heads * 3, kv_heads, head_dim);
            for (const int64_t tokens : {1, 3, 4097}) {
                const int64_t elements = 2ll * layers * kv_heads * head_dim * tokens;
                const int64_t scales = scaled ? 2ll * layers * kv_heads * tokens * 4 : 0;
                EXPECT_EQ(kv_cache_bytes(c, tokens, dtype),
                          elements * element_bytes(dtype) + scales)
                    << "kv_cache_bytes for " << layers << " layers, " << kv_heads << " KV heads of "
                    << head_dim << ", " << tokens << " tokens, dtype " << kv_dtype_name(dtype)
                    << ": 2 (K and V) x layers x KV heads x head_dim x tokens x element bytes"
                    << (scaled ? ", plus one 4-byte scale per token, layer and KV head for K "
                                 "and for V"
                               : "");
            }
        }
    }
}

// MLA caches other things: per token and layer, keys of 1 x rope_dim and
// values of 1 x kv_lora_rank, whatever num_kv_heads says; the formula must
// follow kv_layout(config), not num_kv_heads x head_dim.
TEST(HiddenLab02Bytes, FollowTheLayoutForAnMlaModel) {
    ModelConfig c = config_with(3, 4, 4, 24);
    c.attention = AttentionKind::kLatent;
    c.kv_lora_rank = 40, c.rope_dim = 8;
    for (const int64_t tokens : {1, 9}) {
        EXPECT_EQ(kv_cache_bytes(c, tokens, KvDtype::kF16), 3ll * tokens * (8 + 40) * 2)
            << "an MLA cache holds k_pe (1 x rope_dim) and the latent (1 x kv_lora_rank) per "
               "token and layer: use kv_layout(config), the keys' and values' own shapes";
        EXPECT_EQ(kv_cache_bytes(c, tokens, KvDtype::kInt8), 3ll * tokens * ((8 + 40) + 2 * 4))
            << "an int8 MLA cache: one scale per head of the keys (1) and of the values (1)";
    }
}

// ---------------------------------------------------------------- plan_step

// With c of n tokens cached, for every c from 0 to n - 1, the step starts at
// c and computes tokens c..n-1, pointing into the sequence, logits of the last.
TEST(HiddenLab02StepPlan, StartsWhereTheCacheEndsAtEveryFillLevel) {
    RandomSource random(201);
    SCOPED_TRACE(random.trace());
    const ModelConfig c = config_with(2, 4, 2, 8);
    std::vector<TokenId> sequence;
    for (int i = 0; i < 11; ++i) sequence.push_back(TokenId(random.integer(0, 255)));
    const StepInput naive = plan_step(sequence, nullptr);
    EXPECT_TRUE(naive.start_position == 0 && naive.tokens.size() == sequence.size() &&
                naive.tokens.data() == sequence.data())
        << "without a cache the step is the whole sequence from position 0";
    KvCache cache(c, 16);
    for (int64_t cached = 0; cached < int64_t(sequence.size()); ++cached) {
        const StepInput step = plan_step(sequence, &cache);
        EXPECT_EQ(step.start_position, cached)
            << "with " << cached << " of " << sequence.size()
            << " tokens cached the step starts where the cache ends";
        EXPECT_EQ(step.tokens.size(), sequence.size() - size_t(cached))
            << "with " << cached << " cached the step computes every uncached token, no more";
        EXPECT_EQ(step.tokens.data(), sequence.data() + cached)
            << "the step's tokens are the uncached ones: sequence[" << cached << "...]";
        EXPECT_EQ(step.logits_for, LogitsFor::kLastToken);
        cache.commit(1);
    }
}

// ---------------------------------------------------------------- the cache's rows

// The rows every (position, head) should hold, written by steps of uneven
// sizes; checked after every step, every layer, all positions so far.
void expect_rows(const KvCache& cache, int64_t layer, const std::vector<float>& keys,
                 const std::vector<float>& values, int64_t heads, int64_t dim, double tolerance,
                 int64_t after_step) {
    std::vector<float> scratch(static_cast<size_t>(dim));
    const int64_t positions = int64_t(keys.size()) / (heads * dim);
    for (int64_t p = 0; p < positions; ++p) {
        for (int64_t h = 0; h < heads; ++h) {
            const size_t at = size_t((p * heads + h) * dim);
            for (const bool is_key : {true, false}) {
                const float* row =
                    kv_row(is_key ? cache.keys(layer) : cache.values(layer), p, h, scratch.data());
                const std::vector<float>& want = is_key ? keys : values;
                for (int64_t d = 0; d < dim; ++d) {
                    ASSERT_NEAR(row[d], want[at + size_t(d)], tolerance)
                        << "after step " << after_step << ", layer " << layer << ", position " << p
                        << ", head " << h << (is_key ? ", key" : ", value") << ", element " << d
                        << ": token t of a step starting at position p belongs in row "
                        << "(p + t) * num_kv_heads + h, and earlier rows must stay as they were";
                }
            }
        }
    }
}

// Three KV heads of 5, int8 (one scale per row) and fp32, steps of 4, 1, 3, 1
// tokens, each layer its own data.
TEST(HiddenLab02Rows, EveryStepLandsInItsRowsWithItsScales) {
    RandomSource random(202);
    SCOPED_TRACE(random.trace());
    const int64_t heads = 3, dim = 5, layers = 3;
    const ModelConfig c = config_with(layers, 6, heads, dim);
    for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kInt8}) {
        KvCache cache(c, 9, dtype);
        std::vector<std::vector<float>> keys(layers), values(layers);
        int64_t start = 0, step = 0;
        for (const int64_t count : {4, 1, 3, 1}) {
            for (int64_t layer = 0; layer < layers; ++layer) {
                // Each row its own magnitude, so that a scale in the wrong row shows.
                std::vector<float> k = random.normal(size_t(count * heads * dim));
                std::vector<float> v = random.normal(size_t(count * heads * dim));
                for (size_t i = 0; i < k.size(); ++i) k[i] *= float(1 + (i / size_t(dim)) % 4);
                cache.write(layer, start, k.data(), v.data(), count);
                keys[size_t(layer)].insert(keys[size_t(layer)].end(), k.begin(), k.end());
                values[size_t(layer)].insert(values[size_t(layer)].end(), v.begin(), v.end());
            }
            cache.commit(count);
            start += count, ++step;
            // int8: half a step of the row's grid, max|x| / 127 / 2, at most 4 * 4 / 254.
            const double tolerance = dtype == KvDtype::kF32 ? 0.0 : 0.07;
            for (int64_t layer = 0; layer < layers; ++layer) {
                expect_rows(cache, layer, keys[size_t(layer)], values[size_t(layer)], heads, dim,
                            tolerance, step);
            }
        }
        EXPECT_EQ(cache.num_tokens(), 9);
    }
}

// ---------------------------------------------------------------- cached attention

// Attention by its definition over every key so far: query t of a step that
// starts at `start` sits at position start + t; head h reads KV head h / group.
std::vector<float> attention_over_all(const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v, int64_t start, int64_t count,
                                      const ModelConfig& c) {
    const int64_t dim = c.head_dim, group = c.num_heads / c.num_kv_heads;
    std::vector<float> out(q.size());
    for (int64_t t = 0; t < count; ++t) {
        for (int64_t h = 0; h < c.num_heads; ++h) {
            const float* qh = q.data() + (t * c.num_heads + h) * dim;
            const int64_t g = h / group;
            std::vector<double> p(size_t(start + t + 1));
            for (int64_t j = 0; j <= start + t; ++j) {
                double dot = 0.0;
                for (int64_t d = 0; d < dim; ++d)
                    dot += double(qh[d]) * k[size_t((j * c.num_kv_heads + g) * dim + d)];
                p[size_t(j)] = dot / std::sqrt(double(dim));
            }
            const double top = *std::max_element(p.begin(), p.end());
            double sum = 0.0;
            for (double& x : p) sum += (x = std::exp(x - top));
            for (int64_t d = 0; d < dim; ++d) {
                double acc = 0.0;
                for (int64_t j = 0; j <= start + t; ++j)
                    acc += p[size_t(j)] / sum * v[size_t((j * c.num_kv_heads + g) * dim + d)];
                out[size_t((t * c.num_heads + h) * dim + d)] = float(acc);
            }
        }
    }
    return out;
}

// Six query heads on two KV heads of 5, steps of 4, 1, 2, 1 tokens through
// layer 1 of a cache: each step's output attends over every cached position.
TEST(HiddenLab02Attention, EachStepAttendsOverEveryCachedPosition) {
    RandomSource random(203);
    SCOPED_TRACE(random.trace());
    const ModelConfig c = config_with(2, 6, 2, 5);
    KvCache cache(c, 8);
    std::vector<float> all_k, all_v;
    int64_t start = 0;
    for (const int64_t count : {4, 1, 2, 1}) {
        const std::vector<float> q = random.normal(size_t(count * c.q_dim()), 1.5f);
        const std::vector<float> k = random.normal(size_t(count * c.kv_dim()), 1.5f);
        const std::vector<float> v = random.normal(size_t(count * c.kv_dim()));
        all_k.insert(all_k.end(), k.begin(), k.end());
        all_v.insert(all_v.end(), v.begin(), v.end());
        std::vector<float> out(q.size(), std::nanf(""));
        cache.write(0, start, k.data(), v.data(), count);  // layer 0, as the model would
        attend_with_cache(cache, 1, start, count, q.data(), k.data(), v.data(), out.data(), c);
        cache.commit(count);
        std::ostringstream what;
        what << "attend_with_cache, a step of " << count << " tokens at position " << start
             << " (6 heads on 2 KV heads of 5): append this step's k and v at [start, start + "
                "count), then attend over all start + count cached positions, query t at "
                "position start + t";
        EXPECT_TRUE(test::equal_or_explain(
            what.str(), out, attention_over_all(q, all_k, all_v, start, count, c), 1e-5));
        start += count;
    }
}

// ---------------------------------------------------------------- generation with a cache

// A GQA-3 model: generation through a cache with room for the prompt and 10
// or 11 tokens gives the naive run's tokens, up to the point the cache is full.
TEST(HiddenLab02Generation, CachedGenerationEqualsNaiveUpToAFullCache) {
    RandomSource random(204);
    SCOPED_TRACE(random.trace());
    TinyModelOptions options;
    options.seed = random.seed();
    options.dim = 48, options.num_heads = 6, options.num_kv_heads = 2;
    options.ffn_dim = 72, options.context_length = 40;
    const std::vector<uint8_t> bytes = make_tiny_model(options);
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    ModelRunner runner(model.config, model.weights);
    const std::vector<TokenId> prompt = model.tokenizer.encode("a b", false);
    for (const float temperature : {0.0f, 0.8f}) {
        SamplingParams params;
        params.temperature = temperature;
        params.seed = random.seed();
        params.max_tokens = 11;
        params.ignore_eos = true;
        const auto naive = generate(runner, model.config, model.tokenizer, prompt, params);
        ASSERT_EQ(naive.tokens.size(), 11u);
        // Room for the prompt and 10 tokens ends the run at the cache's size, one
        // more ends it at max_tokens; the last token is sampled but never cached.
        for (const int64_t room : {10, 11}) {
            KvCache cache(model.config, int64_t(prompt.size()) + room);
            const auto cached =
                generate(runner, model.config, model.tokenizer, prompt, params, {}, &cache);
            const std::vector<TokenId> expected(naive.tokens.begin(), naive.tokens.begin() + room);
            EXPECT_EQ(cached.tokens, expected)
                << "temperature " << temperature << ", a cache of the prompt + " << room
                << ": decoding with the cache must give the tokens a full recompute gives, and "
                   "stop when the sequence fills the cache";
            EXPECT_EQ(cached.finish_reason, FinishReason::kLength);
            EXPECT_EQ(cache.num_tokens(), int64_t(prompt.size()) + room - 1)
                << "after prefill and one token per decode step, the cache holds every token "
                   "but the last";
        }
    }
}

}  // namespace
}  // namespace servelab
