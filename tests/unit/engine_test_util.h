// engine_test_util.h — shared setup for the engine tests (Labs 4 and 5).
//
// A random tiny model with its runner, random prompts over its vocabulary,
// and the reference every paged or batched run is held to: the tokens a
// prompt gets alone, on a paged cache of its own (the engine's attention
// path, so the same bits). And a one-number model config for tests of block
// bookkeeping that need no model.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <vector>

#include "reference/engine/generator.h"
#include "reference/engine/runner_generate.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/test_util.h"

namespace servelab::test {

class TinyModelTest : public ::testing::Test {
  protected:
    // Call from SetUp; the model's seed comes from random_.
    void load_tiny_model(TinyModelOptions options) {
        options.seed = random_.seed();
        bytes_ = make_tiny_model(options);
        model_ = std::make_unique<Model>(Model::from_gguf(GgufFile::parse(bytes_)));
        runner_ = std::make_unique<ModelRunner>(model_->config, model_->weights);
    }
    std::vector<TokenId> random_prompt(int64_t length) {
        std::vector<TokenId> prompt;
        for (int64_t i = 0; i < length; ++i) {
            prompt.push_back(TokenId(random_.integer(0, model_->config.vocab_size - 1)));
        }
        return prompt;
    }
    // `prompt` generated alone on a paged cache of its own, by a runner of
    // its own: a ModelRunner serves one thread at a time (its activations
    // are scratch buffers), and an engine thread may be stepping runner_
    // while a test asks for the reference answer. The paged path's logits
    // have the same bits whatever shares the step, however the prompt is
    // chunked and whatever the block size (tokens_up_to_rounding.h), so an
    // engine's request must equal this token for token.
    GenerationResult solo(std::span<const TokenId> prompt, const SamplingParams& params) const {
        ModelRunner reference_runner(model_->config, model_->weights);
        return generate_on_runner(reference_runner, *model_, prompt, params,
                                  RunnerLayout::kContiguous, /*block_size=*/16);
    }
    // `prompt` generated alone by Lab 2's generate() on a contiguous cache:
    // another attention kernel, so compare it with the paged path's tokens
    // up to rounding (tokens_up_to_rounding.h).
    GenerationResult contiguous_solo(std::span<const TokenId> prompt,
                                     const SamplingParams& params) const {
        ModelRunner reference_runner(model_->config, model_->weights);
        KvCache cache(model_->config, model_->config.context_length);
        return generate(reference_runner, model_->config, model_->tokenizer, prompt, params, {},
                        &cache);
    }

    RandomSource random_;
    std::vector<uint8_t> bytes_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<ModelRunner> runner_;
};

// One layer, one KV head of width 1: each KV slot holds one float.
inline ModelConfig one_float_config() {
    ModelConfig c;
    c.num_layers = 1;
    c.num_heads = 1;
    c.num_kv_heads = 1;
    c.head_dim = 1;
    c.dim = 1;
    c.context_length = 1 << 20;
    return c;
}

}  // namespace servelab::test
