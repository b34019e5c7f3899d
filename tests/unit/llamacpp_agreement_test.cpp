// llamacpp_agreement_test.cpp — greedy continuations of SmolLM2 against llama.cpp.
//
// data/golden/llamacpp_greedy.json holds, for each prompt, llama.cpp's prompt
// token ids and its greedy continuation (made by tools/goldens/make_llamacpp_goldens.py
// with llama-cpp-python on the same GGUF). llama.cpp quantizes activations to
// 8 bits inside its Q4_1 matmuls, so its logits differ from our fp32 ones
// (measured: median 0.13, p99 0.64 logits; docs/correctness.md). Where the
// top two logits are that close, either token is "correct" and the two
// continuations may part. So the check is:
//   the continuations are equal token for token up to the first position
//   where they differ, and there OUR top-2 gap is below kNearTieGap.
// That implies equality up to the first position with a gap below
// kNearTieGap, and it also measures how far the agreement really goes.
// Teacher forcing makes it one forward pass per prompt: feeding llama.cpp's
// tokens gives exactly the states our own greedy run would have had, up to
// the first disagreement — which is all that is compared.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "reference/engine/generator.h"
#include "reference/model/model.h"
#include "reference/sampling/sampler.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

// Logit units: about the 99th percentile of the measured |ours - llama.cpp|
// logit difference (0.64) and 4x its median; every divergence seen so far
// happened at a gap below 0.23.
constexpr float kNearTieGap = 0.5f;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizerBuild = true;
#else
constexpr bool kSanitizerBuild = false;
#endif

struct TopTwo {
    TokenId best;
    float gap;
};

TopTwo top_two(const float* logits, int64_t vocab) {
    TokenId best = 0;
    for (int64_t i = 1; i < vocab; ++i) best = logits[i] > logits[best] ? TokenId(i) : best;
    float second = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) {
        if (i != best && logits[i] > second) second = logits[i];
    }
    return {best, logits[best] - second};
}

class LlamaCppAgreement : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        const std::string path = test::source_path(test::kSmolLm2Path);
        if (!std::ifstream(path)) return;
        model_ = new Model(Model::load(path));
        std::ifstream golden(test::source_path("data/golden/llamacpp_greedy.json"));
        golden_ = new nlohmann::json(nlohmann::json::parse(golden));
    }
    static void TearDownTestSuite() {
        delete model_;
        delete golden_;
    }
    void SetUp() override {
        if (model_ == nullptr) GTEST_SKIP() << "SmolLM2 not downloaded: run make setup";
    }
    static Model* model_;
    static nlohmann::json* golden_;
};
Model* LlamaCppAgreement::model_ = nullptr;
nlohmann::json* LlamaCppAgreement::golden_ = nullptr;

TEST_F(LlamaCppAgreement, PromptTokenizationMatches) {
    for (const auto& prompt : (*golden_)["prompts"]) {
        const auto expected = prompt["prompt_ids"].get<std::vector<TokenId>>();
        EXPECT_EQ(model_->tokenizer.encode(prompt["text"].get<std::string>(),
                                           prompt["special"].get<bool>()),
                  expected)
            << prompt["name"];
    }
}

TEST_F(LlamaCppAgreement, GreedyContinuationsMatchUpToNearTies) {
    ModelRunner runner(model_->config, model_->weights);
    const int64_t vocab = model_->config.vocab_size;
    int agreed_total = 0, generated_total = 0, prompts_fully_equal = 0;
    const auto& prompts = (*golden_)["prompts"];
    ASSERT_GE(prompts.size(), 20u);
    // Sanitizer builds run the forward pass ~30x slower: there, a few prompts
    // check memory safety; the release build checks all of them.
    const size_t prompts_to_check = kSanitizerBuild ? 4 : prompts.size();
    for (size_t p = 0; p < prompts_to_check; ++p) {
        const auto& prompt = prompts[p];
        const auto prompt_ids = prompt["prompt_ids"].get<std::vector<TokenId>>();
        const auto generated = prompt["generated_ids"].get<std::vector<TokenId>>();
        ASSERT_FALSE(generated.empty()) << prompt["name"];
        std::vector<TokenId> sequence = prompt_ids;
        sequence.insert(sequence.end(), generated.begin(), generated.end() - 1);
        const std::vector<float> logits = runner.forward({sequence, 0, LogitsFor::kAllTokens});

        size_t agreed = 0;
        for (; agreed < generated.size(); ++agreed) {
            const size_t row = prompt_ids.size() - 1 + agreed;
            const TopTwo ours = top_two(logits.data() + row * vocab, vocab);
            if (ours.best == generated[agreed]) continue;
            EXPECT_LT(ours.gap, kNearTieGap)
                << prompt["name"] << ": step " << agreed << " we pick " << ours.best
                << ", llama.cpp picked " << generated[agreed] << ", though our top-2 gap is "
                << ours.gap;
            break;
        }
        // The real generation loop (not teacher-forced) on the short prompts:
        // its tokens must be the same agreed prefix.
        if (prompt_ids.size() <= 16 && agreed > 0) {
            SamplingParams greedy;
            greedy.max_tokens = int32_t(std::min<size_t>(agreed, 8));
            greedy.ignore_eos = true;
            const GenerationResult result =
                generate(runner, model_->config, model_->tokenizer, prompt_ids, greedy);
            EXPECT_EQ(result.tokens, std::vector<TokenId>(generated.begin(),
                                                          generated.begin() + greedy.max_tokens))
                << prompt["name"];
        }
        agreed_total += int(agreed);
        generated_total += int(generated.size());
        prompts_fully_equal += agreed == generated.size();
    }
    std::printf(
        "llama.cpp agreement: %d of %d golden tokens equal before the first divergence; "
        "%d of %zu prompts equal to the end\n",
        agreed_total, generated_total, prompts_fully_equal, prompts_to_check);
}

}  // namespace
}  // namespace servelab
