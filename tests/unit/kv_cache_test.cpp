// kv_cache_test.cpp — Lab 2: the KV cache changes the cost of decoding, not its result.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "reference/engine/generator.h"
#include "reference/engine/step_plan.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;
using ::testing::HasSubstr;

struct TinyModel {
    std::vector<uint8_t> bytes;  // the GGUF image; must outlive the model
    Model model;
};

std::unique_ptr<TinyModel> make_model(const TinyModelOptions& options) {
    auto bytes = make_tiny_model(options);
    Model model = Model::from_gguf(GgufFile::parse(bytes));
    return std::make_unique<TinyModel>(TinyModel{std::move(bytes), std::move(model)});
}

// Head layouts: MHA, GQA 2:1 and 4:1, MQA.
const std::vector<std::pair<int64_t, int64_t>> kHeadLayouts = {{4, 4}, {4, 2}, {8, 2}, {4, 1}};

// "got" against the formula's "expected" bytes, with what a difference of that
// size usually means.
std::string bytes_diagnosis(int64_t got, int64_t expected, int64_t scale_bytes) {
    std::string why;
    if (2 * got == expected) {
        why = ": exactly half, as if only the keys were counted; the values (V) are cached too";
    } else if (got == 2 * expected) {
        why = ": exactly twice the formula";
    } else if (scale_bytes > 0 && got == expected - scale_bytes) {
        why = ": the fp32 scales (one per token, layer and KV head, for K and for V) are missing";
    } else if (scale_bytes > 0 && 2 * (got - scale_bytes / 2) == expected - scale_bytes) {
        why = ": half the elements and half the scales: only the keys were counted; the values "
              "(V) are cached too";
    }
    return "kv_cache_bytes gave " + std::to_string(got) + ", expected " +
           std::to_string(expected) + why;
}

TEST(KvCacheBytes, FollowsTheFormula) {
    ModelConfig c;
    c.num_layers = 30, c.num_kv_heads = 3, c.head_dim = 64;  // SmolLM2-135M
    const auto check = [&](int64_t seq_len, KvDtype dtype, int64_t expected, int64_t scales) {
        const int64_t got = kv_cache_bytes(c, seq_len, dtype);
        EXPECT_EQ(got, expected) << bytes_diagnosis(got, expected, scales) << " ("
                                 << c.num_layers << " layers, " << c.num_kv_heads << " KV heads of "
                                 << c.head_dim << ", " << seq_len << " tokens)";
    };
    check(1, KvDtype::kF32, 46080, 0);
    check(8192, KvDtype::kF16, 2ll * 30 * 3 * 64 * 8192 * 2, 0);
    c.num_layers = 32, c.num_kv_heads = 32, c.head_dim = 128;  // a 7B MHA model
    check(4096, KvDtype::kF16, 2147483648ll, 0);                // 2 GiB
    // int8 adds one fp32 scale per token, layer and KV head, for K and for V.
    const int64_t scales = 2ll * 32 * 32 * 4096 * 4;
    check(4096, KvDtype::kInt8, 1073741824ll + scales, scales);
}

TEST(KvCacheBytes, AgreesWithWhatTheCacheAllocates) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (auto [heads, kv_heads] : kHeadLayouts) {
        auto tiny = make_model({.num_layers = 3, .num_heads = heads, .num_kv_heads = kv_heads});
        const int64_t tokens = random.integer(1, tiny->model.config.context_length);
        const KvCache cache(tiny->model.config, tokens);
        EXPECT_EQ(cache.allocated_bytes(),
                  kv_cache_bytes(tiny->model.config, tokens, KvDtype::kF32))
            << heads << " heads, " << kv_heads << " kv heads, " << tokens << " tokens";
    }
}

TEST(StepPlan, PrefillThenOneTokenPerDecodeStep) {
    auto tiny = make_model({});
    const std::vector<TokenId> sequence = {5, 6, 7, 8, 9};
    const StepInput naive = plan_step(sequence, nullptr);
    EXPECT_EQ(naive.start_position, 0);
    EXPECT_EQ(naive.tokens.size(), 5u);
    KvCache cache(tiny->model.config, 16);
    const StepInput prefill = plan_step(sequence, &cache);
    EXPECT_EQ(prefill.start_position, 0);
    EXPECT_EQ(prefill.tokens.size(), 5u);
    cache.commit(4);  // as if the first four were computed
    const StepInput decode = plan_step(sequence, &cache);
    EXPECT_EQ(decode.start_position, 4)
        << "with 4 of 5 tokens cached, the step starts where the cache ends (position 4); "
        << (decode.start_position == 0 ? "starting at 0 recomputes the cached tokens" : "");
    ASSERT_EQ(decode.tokens.size(), 1u) << "only the uncached token is computed";
    EXPECT_EQ(decode.tokens[0], 9);
}

// Feeding the sequence in pieces through the cache gives the logits a full
// recompute gives, at every step.
TEST(KvCache, StepwiseLogitsEqualFullRecompute) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (auto [heads, kv_heads] : kHeadLayouts) {
        auto tiny =
            make_model({.seed = random.seed(), .num_heads = heads, .num_kv_heads = kv_heads});
        const int64_t vocab = tiny->model.config.vocab_size;
        ModelRunner runner(tiny->model.config, tiny->model.weights);
        std::vector<TokenId> ids;
        for (int i = 0; i < 20; ++i) ids.push_back(TokenId(random.integer(0, vocab - 1)));
        const auto full = runner.forward({ids, 0, LogitsFor::kAllTokens});

        KvCache cache(tiny->model.config, 20);
        int64_t done = 0;
        while (done < 20) {
            const int64_t chunk = std::min<int64_t>(random.integer(1, 6), 20 - done);
            const std::span<const TokenId> piece(ids.data() + done, size_t(chunk));
            const auto logits = runner.forward({piece, done, LogitsFor::kAllTokens}, &cache);
            for (int64_t t = 0; t < chunk; ++t) {
                for (int64_t i = 0; i < vocab; ++i) {
                    ASSERT_NEAR(logits[t * vocab + i], full[(done + t) * vocab + i], 1e-4)
                        << "position " << done + t << ", " << heads << "/" << kv_heads << " heads";
                }
            }
            done += chunk;
        }
        EXPECT_EQ(cache.num_tokens(), 20);
    }
}

// write() puts token t of a step at position p = start + t, head h, in row
// p * num_heads + h of the layer's tensor: read back through keys()/values().
TEST(KvCache, WritesEachTokensHeadsToTheirRows) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    auto tiny = make_model({.num_layers = 2, .num_heads = 4, .num_kv_heads = 2});
    const ModelConfig& config = tiny->model.config;
    const int64_t heads = config.num_kv_heads, dim = config.head_dim, steps[] = {3, 1, 2};
    KvCache cache(config, 6);
    std::vector<float> all_k, all_v;  // what every position should hold, in order
    // What a write that computes row start + t * num_heads + h would leave.
    std::vector<float> misplaced(size_t(6 * heads * dim), NAN);
    int64_t start = 0;
    for (int64_t count : steps) {
        const std::vector<float> k = random.normal(count * heads * dim);
        const std::vector<float> v = random.normal(count * heads * dim);
        for (int64_t layer = 0; layer < config.num_layers; ++layer) {
            cache.write(layer, start, k.data(), v.data(), count);
        }
        cache.commit(count);
        all_k.insert(all_k.end(), k.begin(), k.end());
        all_v.insert(all_v.end(), v.begin(), v.end());
        for (int64_t t = 0; t < count; ++t) {
            for (int64_t head = 0; head < heads; ++head) {
                const int64_t row = start + t * heads + head;
                std::copy_n(k.begin() + (t * heads + head) * dim, dim,
                            misplaced.begin() + row * dim);
            }
        }
        start += count;
    }
    std::vector<float> scratch(static_cast<size_t>(dim));
    const auto cached_key = [&](int64_t layer, int64_t position, int64_t head) {
        const float* key = kv_row(cache.keys(layer), position, head, scratch.data());
        return std::vector<float>(key, key + dim);
    };
    const auto slice = [&](const std::vector<float>& rows, int64_t row) {
        return std::vector<float>(rows.begin() + row * dim, rows.begin() + (row + 1) * dim);
    };
    bool matches_misplaced = true;  // on every row such a write would have written
    for (int64_t row = 0; row < start * heads; ++row) {
        if (std::isnan(misplaced[size_t(row * dim)])) continue;
        matches_misplaced &= cached_key(0, row / heads, row % heads) == slice(misplaced, row);
    }
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
        for (int64_t position = 0; position < start; ++position) {
            for (int64_t head = 0; head < heads; ++head) {
                const float* value = kv_row(cache.values(layer), position, head, scratch.data());
                const std::vector<float> got_v(value, value + dim);
                const int64_t row = position * heads + head;
                ASSERT_TRUE(cached_key(layer, position, head) == slice(all_k, row) &&
                            got_v == slice(all_v, row))
                    << "layer " << layer << ", position " << position << ", head " << head
                    << ": the cached key or value is not the one written there"
                    << (matches_misplaced
                            ? ". The cache holds what row start + t * num_heads + h gives: the "
                              "position must be multiplied by num_heads as well, "
                              "(start + t) * num_heads + h"
                            : ". Token t of a step starting at position p belongs in row "
                              "(p + t) * num_heads + h");
            }
        }
    }
}

TEST(KvCache, CachedGenerationEqualsNaiveGreedyAndSampled) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (auto [heads, kv_heads] : kHeadLayouts) {
        auto tiny =
            make_model({.seed = random.seed(), .num_heads = heads, .num_kv_heads = kv_heads});
        ModelRunner runner(tiny->model.config, tiny->model.weights);
        const auto prompt =
            tiny->model.tokenizer.encode("the cache keeps what was computed", false);
        for (float temperature : {0.0f, 1.0f}) {
            SamplingParams params;
            params.temperature = temperature;
            params.seed = random.seed();
            params.max_tokens = 24;
            params.ignore_eos = true;
            const auto naive =
                generate(runner, tiny->model.config, tiny->model.tokenizer, prompt, params);
            KvCache cache(tiny->model.config, int64_t(prompt.size()) + params.max_tokens);
            const auto cached = generate(runner, tiny->model.config, tiny->model.tokenizer, prompt,
                                         params, {}, &cache);
            EXPECT_EQ(cached.tokens, naive.tokens) << "temperature " << temperature;
            EXPECT_EQ(cached.text, naive.text);
            EXPECT_EQ(cache.num_tokens(), int64_t(prompt.size() + naive.tokens.size()) - 1);
        }
    }
}

TEST(KvCache, GenerationStopsWhenTheCacheIsFull) {
    auto tiny = make_model({});
    ModelRunner runner(tiny->model.config, tiny->model.weights);
    const std::vector<TokenId> prompt = {10, 11, 12};
    SamplingParams params;
    params.max_tokens = 100;
    params.ignore_eos = true;
    KvCache cache(tiny->model.config, 10);
    const auto result =
        generate(runner, tiny->model.config, tiny->model.tokenizer, prompt, params, {}, &cache);
    EXPECT_EQ(result.tokens.size(), 7u);
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
}

TEST(KvCache, RejectsStepsThatDoNotContinueTheCache) {
    auto tiny = make_model({});
    ModelRunner runner(tiny->model.config, tiny->model.weights);
    KvCache cache(tiny->model.config, 8);
    const std::vector<TokenId> three = {1, 2, 3};
    EXPECT_THAT(test::error_of([&] {
                    runner.forward({three, 2}, &cache);
                }),
                HasSubstr("step starts at position 2 but the KV cache holds 0 tokens"));
    runner.forward({three, 0}, &cache);
    const std::vector<TokenId> six = {1, 2, 3, 4, 5, 6};
    EXPECT_THAT(test::error_of([&] {
                    runner.forward({six, 3}, &cache);
                }),
                HasSubstr("past the KV cache's 8 tokens"));
    EXPECT_THAT(test::error_of([&] { KvCache too_big(tiny->model.config, 100000); }),
                HasSubstr("outside [1, context length"));
    SamplingParams params;
    EXPECT_THAT(test::error_of([&] {
                    generate(runner, tiny->model.config, tiny->model.tokenizer, three, params, {},
                             &cache);
                }),
                HasSubstr("must start empty"));
}

}  // namespace
}  // namespace servelab
