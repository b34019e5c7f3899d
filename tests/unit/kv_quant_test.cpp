// kv_quant_test.cpp — Lab 3: int8/fp8/fp16 KV caches, their error and their size.
//
// Quantizing a row must respect its error bound (half a quantization step);
// a quantized cache must return what was written up to that bound; attention
// over it must stay close to fp32 attention; and the bytes the cache
// allocates must be exactly what kv_cache_bytes (and `servelab info --kv`)
// report. On SmolLM2 the int8 cache must keep the greedy choices.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "kernels/cpu/attention_kv.h"
#include "kernels/cpu/kv_quant.h"
#include "reference/engine/kv_quality.h"
#include "reference/kv/kv_budget.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

// A row whose entries span several orders of magnitude, as real K/V rows do
// (a few large outlier channels among small ones).
std::vector<float> random_row(RandomSource& random, int64_t n) {
    std::vector<float> row =
        random.normal(size_t(n), std::pow(10.0f, float(random.integer(-3, 3))));
    row[size_t(random.integer(0, n - 1))] *= 20.0f;  // an outlier channel
    return row;
}

float max_magnitude(const std::vector<float>& row) {
    float largest = 0.0f;
    for (float x : row) largest = std::max(largest, std::fabs(x));
    return largest;
}

TEST(KvQuant, Int8RowErrorIsAtMostHalfAStep) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t n = random.integer(1, 160);
        const std::vector<float> row = random_row(random, n);
        std::vector<int8_t> codes(size_t(n), int8_t(99));
        const float scale = quantize_int8_row(row.data(), n, codes.data());
        EXPECT_FLOAT_EQ(scale, max_magnitude(row) / 127.0f);
        std::vector<float> back(size_t(n), NAN);
        dequantize_int8_row(codes.data(), scale, n, back.data());
        int largest_code = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float exact = row[size_t(i)] / scale;
            const bool truncated = codes[size_t(i)] == int8_t(std::trunc(exact)) &&
                                   std::fabs(exact - std::trunc(exact)) > 0.5f;
            ASSERT_LE(std::fabs(back[size_t(i)] - row[size_t(i)]), 0.5f * scale * 1.0001f)
                << "element " << i << " of " << n << ": x / scale = " << exact << " became code "
                << int(codes[size_t(i)]) << ", more than half a step away"
                << (truncated ? ": the code is x / scale truncated toward zero; round to the "
                                "nearest code instead (std::nearbyint)"
                              : "");
            EXPECT_EQ(back[size_t(i)], float(codes[size_t(i)]) * scale);
            largest_code = std::max(largest_code, std::abs(int(codes[size_t(i)])));
        }
        EXPECT_EQ(largest_code, 127) << "the largest magnitude must use the full range";
    }
}

TEST(KvQuant, Int8IsSymmetricAndKeepsZeroRowsExact) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::vector<float> row = random_row(random, 64);
    std::vector<float> negated(row.size());
    for (size_t i = 0; i < row.size(); ++i) negated[i] = -row[i];
    std::vector<int8_t> codes(64), negated_codes(64);
    EXPECT_EQ(quantize_int8_row(row.data(), 64, codes.data()),
              quantize_int8_row(negated.data(), 64, negated_codes.data()));
    for (size_t i = 0; i < 64; ++i) EXPECT_EQ(negated_codes[i], -codes[i]);

    const std::vector<float> zeros(64, 0.0f);
    std::vector<int8_t> zero_codes(64, int8_t(7));
    EXPECT_EQ(quantize_int8_row(zeros.data(), 64, zero_codes.data()), 0.0f);
    for (size_t i = 0; i < 64; ++i) {
        EXPECT_EQ(zero_codes[i], 0) << "code " << i << " of an all-zero row: every code must be "
                                    << "written, as 0 (they were poisoned with 7 beforehand)";
    }
    std::vector<float> back(64, NAN);
    dequantize_int8_row(zero_codes.data(), 0.0f, 64, back.data());
    for (float x : back) EXPECT_EQ(x, 0.0f);
}

TEST(KvQuant, Fp8RowErrorIsWithinHalfAnUlp) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t n = random.integer(1, 160);
        const std::vector<float> row = random_row(random, n);
        std::vector<uint8_t> codes(static_cast<size_t>(n));
        const float scale = quantize_fp8_row(row.data(), n, codes.data());
        std::vector<float> back(size_t(n), NAN);
        dequantize_fp8_row(codes.data(), scale, n, back.data());
        for (int64_t i = 0; i < n; ++i) {
            // 3 mantissa bits: relative error 2^-4 for normals; absolute
            // 2^-10 · scale in the subnormal range.
            const float x = row[size_t(i)];
            const float bound = (std::fabs(x) / 16.0f + scale / 1024.0f) * 1.0001f;
            ASSERT_LE(std::fabs(back[size_t(i)] - x), bound) << "element " << i;
        }
    }
}

// Writes random K/V into caches of every type and reads them back row by row.
TEST(KvQuant, CachesReturnWhatWasWrittenWithinTheTypesPrecision) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    auto bytes = make_tiny_model({.num_layers = 2, .dim = 64, .num_heads = 4, .num_kv_heads = 2});
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    const int64_t tokens = 20, kv_dim = model.config.kv_dim(), head_dim = model.config.head_dim;
    const auto k = random.normal(size_t(tokens * kv_dim), 3.0f);
    const auto v = random.normal(size_t(tokens * kv_dim), 0.2f);
    // Largest error relative to the row's largest magnitude.
    const std::pair<KvDtype, float> types[] = {{KvDtype::kF32, 0.0f},
                                               {KvDtype::kF16, 1.0f / 2048},
                                               {KvDtype::kBF16, 1.0f / 256},
                                               {KvDtype::kInt8, 0.5f / 127},
                                               {KvDtype::kFp8E4M3, 1.0f / 16}};
    for (auto [dtype, relative_bound] : types) {
        KvCache cache(model.config, tokens, dtype);
        cache.write(1, 0, k.data(), v.data(), tokens);
        std::vector<float> scratch(static_cast<size_t>(head_dim));
        for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t g = 0; g < model.config.num_kv_heads; ++g) {
                for (auto [view, source] : {std::pair{cache.keys(1), &k}, {cache.values(1), &v}}) {
                    const float* row = kv_row(view, t, g, scratch.data());
                    const float* expected =
                        source->data() + (t * model.config.num_kv_heads + g) * head_dim;
                    float largest = 0.0f;
                    for (int64_t d = 0; d < head_dim; ++d)
                        largest = std::max(largest, std::fabs(expected[d]));
                    for (int64_t d = 0; d < head_dim; ++d) {
                        ASSERT_LE(std::fabs(row[d] - expected[d]), relative_bound * largest * 1.01f)
                            << kv_dtype_name(dtype) << " token " << t << " head " << g;
                    }
                }
            }
        }
    }
}

// Attention over a quantized cache stays close to fp32 attention. Bounds are
// about 3x the largest error seen over many seeds (relative to the largest
// output magnitude).
TEST(KvQuant, AttentionOutputErrorIsBounded) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const std::pair<KvDtype, double> types[] = {
        {KvDtype::kF16, 4e-3}, {KvDtype::kInt8, 5e-2}, {KvDtype::kFp8E4M3, 2.5e-1}};
    auto bytes = make_tiny_model(
        {.num_layers = 1, .dim = 128, .num_heads = 4, .num_kv_heads = 2, .context_length = 512});
    const Model model = Model::from_gguf(GgufFile::parse(bytes));
    const ModelConfig& c = model.config;
    for (int trial = 0; trial < 5; ++trial) {
        const int64_t num_keys = random.integer(16, 300), num_queries = random.integer(1, 4);
        const auto q = random.normal(size_t(num_queries * c.q_dim()));
        const auto k = random.normal(size_t(num_keys * c.kv_dim()));
        const auto v = random.normal(size_t(num_keys * c.kv_dim()));
        const AttentionShape shape{num_queries, num_keys, c.num_heads, c.num_kv_heads, c.head_dim};
        const auto attend = [&](KvDtype dtype) {
            KvCache cache(c, num_keys, dtype);
            cache.write(0, 0, k.data(), v.data(), num_keys);
            std::vector<float> out(q.size(), NAN);
            attention_over_kv(q.data(), cache.keys(0), cache.values(0), out.data(), shape);
            return out;
        };
        const std::vector<float> exact = attend(KvDtype::kF32);
        for (auto [dtype, bound] : types) {
            EXPECT_LE(test::max_relative_error(attend(dtype), exact), bound)
                << kv_dtype_name(dtype) << ", " << num_keys << " keys";
        }
    }
}

TEST(KvCacheBytes, AllocationEqualsTheFormulaForEveryTypeAndLayout) {
    const KvDtype dtypes[] = {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8,
                              KvDtype::kFp8E4M3};
    std::vector<std::pair<std::string, ModelConfig>> configs;
    for (auto [heads, kv_heads] :
         std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {4, 2}, {4, 1}}) {
        auto bytes = make_tiny_model({.num_heads = heads, .num_kv_heads = kv_heads});
        configs.emplace_back("tiny", ModelConfig::from_gguf(GgufFile::parse(bytes)));
    }
    auto mla_bytes = make_tiny_model({.mla = true});
    configs.emplace_back("tiny MLA", ModelConfig::from_gguf(GgufFile::parse(mla_bytes)));
    for (const auto& [name, config] : named_model_configs()) configs.emplace_back(name, config);

    for (const auto& [name, config] : configs) {
        for (KvDtype dtype : dtypes) {
            const int64_t tokens = 16;
            const KvCache cache(config, tokens, dtype);
            EXPECT_EQ(cache.allocated_bytes(), kv_cache_bytes(config, tokens, dtype))
                << name << " " << kv_dtype_name(dtype);
            const KvFootprint f = kv_footprint(config, dtype, int64_t(1) << 34);
            EXPECT_EQ(f.bytes_per_token * tokens, cache.allocated_bytes()) << name;
            EXPECT_EQ(f.bytes_at_4k, f.bytes_per_token * 4096);
            EXPECT_EQ(f.concurrent_4k_requests, (int64_t(1) << 34) / f.bytes_at_4k);
        }
    }
}

TEST(KvCacheBytes, NamedConfigsMatchPublishedFigures) {
    // Per token, fp16: Llama-2-7B 2·32·32·128·2 = 512 KiB; Llama-3-8B a quarter
    // of that (8 KV heads); DeepSeek-V2 60·(512+64)·2 = 67.5 KiB (its paper's
    // 4.5·d_h·l elements per token).
    std::map<std::string, int64_t> per_token_fp16;
    for (const auto& [name, config] : named_model_configs()) {
        per_token_fp16[name] = kv_cache_bytes(config, 1, KvDtype::kF16);
    }
    EXPECT_EQ(per_token_fp16["Llama-2-7B"], 512 * 1024);
    EXPECT_EQ(per_token_fp16["Llama-3-8B"], 128 * 1024);
    EXPECT_EQ(per_token_fp16["DeepSeek-V2"], 60 * 576 * 2);
    EXPECT_EQ(per_token_fp16["SmolLM2-135M"], 2 * 30 * 3 * 64 * 2);
    EXPECT_EQ(per_token_fp16["Falcon-7B"], 2 * 32 * 1 * 64 * 2);
}

TEST(KvCacheBytes, ParsesMemorySizes) {
    EXPECT_EQ(parse_byte_size("16GiB"), int64_t(16) << 30);
    EXPECT_EQ(parse_byte_size("80GB"), int64_t(80'000'000'000));
    EXPECT_EQ(parse_byte_size("1.5MiB"), int64_t(1536) * 1024);
    EXPECT_EQ(parse_byte_size("4096"), 4096);
    for (const char* bad : {"", "GiB", "12 parsecs", "-1GiB", "0", "1e30"}) {
        EXPECT_THROW(parse_byte_size(bad), Error) << bad;
    }
}

TEST(KvCacheBytes, BudgetMustFitBesideTheModel) {
    const int64_t gib = int64_t(1) << 30;
    EXPECT_NO_THROW(check_kv_budget_fits(2 * gib, 24 * gib, gib, "physical memory"));
    EXPECT_NO_THROW(check_kv_budget_fits(23 * gib, 24 * gib, gib, "physical memory"))
        << "a budget that exactly fills what the model leaves must be accepted";
    try {
        check_kv_budget_fits(int64_t(1) << 40, 24 * gib, gib, "physical memory");
        ADD_FAILURE() << "a 1 TiB KV budget on a 24 GiB machine must be refused at start";
    } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("--kv-memory"), std::string::npos)
            << "the error must name the flag to change: " << message;
        EXPECT_NE(message.find("23.00 GiB"), std::string::npos)
            << "the error must say how much room is left: " << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    }
    EXPECT_THROW(check_kv_budget_fits(gib + 1, 24 * gib, 23 * gib, "GPU memory"), Error)
        << "the model's own bytes must be subtracted from the memory";
    EXPECT_THROW(check_kv_budget_fits(1, gib, 2 * gib, "GPU memory"), Error)
        << "a model larger than the memory leaves no room at all";
}

// The measurement the handout reports, on a few golden prompts: an int8
// cache must keep nearly every greedy choice and small logit errors.
TEST(KvQuant, SmolLm2Int8CacheKeepsGreedyChoices) {
    const std::string path = test::source_path(test::kSmolLm2Path);
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
    const Model model = Model::load(path);
    ModelRunner runner(model.config, model.weights);
    const char* prompts[] = {"The capital of France is",
                             "def fibonacci(n):", "Once upon a time, in a small village,"};
    std::vector<KvQuality> results;
    for (const char* prompt : prompts) {
        const auto ids = model.tokenizer.encode(prompt, true);
        results.push_back(measure_kv_quality(runner, model.config, model.tokenizer, ids, 12,
                                             KvDtype::kF32, KvDtype::kInt8));
    }
    const KvQuality total = combine(results);
    EXPECT_EQ(total.compared_steps, 3 * 12);
    EXPECT_GE(total.argmax_agreements * 10, total.compared_steps * 9);  // 98.8% on the goldens
    EXPECT_GT(total.max_abs_logit_error, 0.0f) << "int8 must not be exact: is it quantizing?";
    EXPECT_LT(total.max_abs_logit_error, 3.0f);  // 1.36 at most over the 26 golden prompts
}

}  // namespace
}  // namespace servelab
