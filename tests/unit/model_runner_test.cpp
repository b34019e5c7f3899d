// model_runner_test.cpp — the forward pass on generated tiny models.
//
// Exact agreement with independent implementations is tested end to end
// (tests/e2e: numpy oracle; llamacpp_agreement_test: llama.cpp). These tests
// check the properties any correct causal forward pass has.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>

#include "kernels/common/error.h"
#include "reference/engine/model_runner.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

struct TinyModel {
    std::vector<uint8_t> bytes;  // must outlive the model (the GGUF is not copied)
    Model model;
};

std::unique_ptr<TinyModel> make_model(const TinyModelOptions& options) {
    auto bytes = make_tiny_model(options);
    GgufFile file = GgufFile::parse(bytes);
    Model model = Model::from_gguf(std::move(file));
    return std::make_unique<TinyModel>(TinyModel{std::move(bytes), std::move(model)});
}

std::vector<TokenId> random_tokens(RandomSource& random, int64_t n, int64_t vocab) {
    std::vector<TokenId> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(TokenId(random.integer(0, vocab - 1)));
    return ids;
}

TEST(ModelRunner, LogitsArePoisonFreeAndDeterministic) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    auto tiny = make_model({});
    ModelRunner runner(tiny->model.config, tiny->model.weights);
    const auto ids = random_tokens(random, 12, tiny->model.config.vocab_size);
    const auto first = runner.forward({ids, 0, LogitsFor::kAllTokens});
    ASSERT_EQ(first.size(), ids.size() * size_t(tiny->model.config.vocab_size));
    for (float v : first) ASSERT_TRUE(std::isfinite(v));
    EXPECT_EQ(runner.forward({ids, 0, LogitsFor::kAllTokens}), first);
}

TEST(ModelRunner, LastTokenLogitsEqualLastRowOfAll) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    auto tiny = make_model({.seed = random.seed()});
    const int64_t vocab = tiny->model.config.vocab_size;
    ModelRunner runner(tiny->model.config, tiny->model.weights);
    const auto ids = random_tokens(random, 9, vocab);
    const auto all = runner.forward({ids, 0, LogitsFor::kAllTokens});
    const auto last = runner.forward({ids, 0, LogitsFor::kLastToken});
    ASSERT_EQ(last.size(), size_t(vocab));
    for (int64_t i = 0; i < vocab; ++i) EXPECT_EQ(last[i], all[8 * vocab + i]);
}

// Causality: appending tokens must not change the logits of earlier positions.
TEST(ModelRunner, PrefixLogitsDoNotDependOnLaterTokens) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    auto tiny = make_model({.seed = random.seed(), .num_heads = 4, .num_kv_heads = 1});
    const int64_t vocab = tiny->model.config.vocab_size;
    ModelRunner runner(tiny->model.config, tiny->model.weights);
    const auto ids = random_tokens(random, 20, vocab);
    const auto full = runner.forward({ids, 0, LogitsFor::kAllTokens});
    const std::vector<TokenId> prefix(ids.begin(), ids.begin() + 7);
    const auto short_run = runner.forward({prefix, 0, LogitsFor::kAllTokens});
    for (size_t i = 0; i < short_run.size(); ++i) EXPECT_NEAR(short_run[i], full[i], 1e-4);
}

// The same random floats quantized to each type: logits stay close to fp32's,
// which checks every dequantization path end to end. (A wrong dequantization,
// e.g. swapped nibbles, gives a relative error near 1.4: unrelated logits.)
TEST(ModelRunner, QuantizedWeightsApproximateFp32) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    const uint64_t seed = random.seed();
    auto reference = make_model({.seed = seed});
    const auto ids = random_tokens(random, 10, reference->model.config.vocab_size);
    ModelRunner reference_runner(reference->model.config, reference->model.weights);
    const auto expected = reference_runner.forward({ids, 0, LogitsFor::kAllTokens});
    // Bounds about 3x the largest relative L2 error seen over many seeds.
    for (auto [type, tolerance] : {std::pair{GgmlType::kF16, 4e-3},
                                   {GgmlType::kBF16, 3e-2},
                                   {GgmlType::kQ8_0, 0.1},
                                   {GgmlType::kQ4_1, 0.8},
                                   {GgmlType::kQ4_0, 0.8}}) {
        auto quantized = make_model({.seed = seed, .weight_type = type});
        ModelRunner runner(quantized->model.config, quantized->model.weights);
        const auto logits = runner.forward({ids, 0, LogitsFor::kAllTokens});
        double diff_squares = 0, ref_squares = 0;  // relative L2 error of all logits
        for (size_t i = 0; i < logits.size(); ++i) {
            diff_squares += double(logits[i] - expected[i]) * (logits[i] - expected[i]);
            ref_squares += double(expected[i]) * expected[i];
        }
        const double error = std::sqrt(diff_squares / ref_squares);
        EXPECT_LT(error, tolerance) << ggml_type_traits(type).name;
        EXPECT_GT(error, 0.0) << ggml_type_traits(type).name << " should differ from fp32";
    }
}

// Every kernel splits work so that each output is computed by one thread in
// a fixed order: the thread count must not change a single bit.
TEST(ModelRunner, ThreadCountDoesNotChangeLogits) {
    RandomSource random;
    SCOPED_TRACE(random.trace());
    auto tiny = make_model({.seed = random.seed(), .num_heads = 8, .num_kv_heads = 2});
    ModelRunner runner(tiny->model.config, tiny->model.weights);
    const auto ids = random_tokens(random, 23, tiny->model.config.vocab_size);
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto one_thread = runner.forward({ids, 0, LogitsFor::kAllTokens});
    omp_set_num_threads(3);
    const auto three_threads = runner.forward({ids, 0, LogitsFor::kAllTokens});
    omp_set_num_threads(saved_threads);
    EXPECT_EQ(one_thread, three_threads);
}

TEST(ModelRunner, UntiedHeadIsUsed) {
    auto tied = make_model({.seed = 5});
    auto untied = make_model({.seed = 5, .tied_embeddings = false});
    EXPECT_TRUE(tied->model.config.tied_embeddings);
    EXPECT_FALSE(untied->model.config.tied_embeddings);
    const std::vector<TokenId> ids = {10, 20, 30};
    ModelRunner a(tied->model.config, tied->model.weights);
    ModelRunner b(untied->model.config, untied->model.weights);
    EXPECT_NE(a.forward({ids, 0}), b.forward({ids, 0}));
}

TEST(ModelRunner, RejectsBadSteps) {
    auto tiny = make_model({.context_length = 16});
    ModelRunner runner(tiny->model.config, tiny->model.weights);
    const auto expect_error = [&](const StepInput& step, const std::string& needle) {
        EXPECT_THAT(test::error_of([&] { runner.forward(step); }), ::testing::HasSubstr(needle));
    };
    const std::vector<TokenId> empty;
    expect_error({empty, 0}, "at least one token");
    const std::vector<TokenId> bad_id = {1, int32_t(tiny->model.config.vocab_size)};
    expect_error({bad_id, 0}, "outside the vocabulary");
    const std::vector<TokenId> negative = {-1};
    expect_error({negative, 0}, "outside the vocabulary");
    const std::vector<TokenId> too_long(17, 5);
    expect_error({too_long, 0}, "context length 16");
    const std::vector<TokenId> one = {5};
    expect_error({one, 3}, "position 0");
}

}  // namespace
}  // namespace servelab
