// engine_test.cpp — Lab 5 groundwork: the many-request engine.
//
// Requests added together and stepped as one continuously batched engine —
// with a pool small enough to force preemption — must each produce exactly
// what they produce alone, stream text that adds up to their final text,
// and give back every block when they finish or are cancelled.
#include <gtest/gtest.h>

#include <map>

#include "kernels/common/error.h"
#include "reference/engine/engine.h"
#include "reference/engine/request_builder.h"
#include "tests/unit/engine_test_util.h"

namespace servelab {
namespace {

class EngineTest : public test::TinyModelTest {
  protected:
    void SetUp() override { load_tiny_model({.context_length = 128}); }
    static int64_t free_after_evicting(Engine& engine) {
        engine.kv().clear_prefix_cache();
        return engine.kv().cache().allocator().num_free();
    }
};

TEST_F(EngineTest, EveryRequestEqualsItsSoloRunAndStreamsItsText) {
    SCOPED_TRACE(random_.trace());
    EngineConfig config;
    config.num_kv_blocks = 24;  // 96 slots for 16 requests of up to 60 tokens
    config.block_size = 4;
    config.scheduler.max_num_batched_tokens = 40;
    Engine engine(*model_, *runner_, config);
    std::map<int64_t, std::vector<TokenId>> prompts;
    std::map<int64_t, SamplingParams> params_of;
    std::map<int64_t, std::string> streamed;
    const std::vector<TokenId> shared = random_prompt(12);
    for (int i = 0; i < 16; ++i) {
        std::vector<TokenId> prompt = i % 3 == 0 ? shared : std::vector<TokenId>{};
        for (TokenId t : random_prompt(random_.integer(1, 24))) prompt.push_back(t);
        SamplingParams params;
        params.max_tokens = int32_t(random_.integer(8, 24));
        params.ignore_eos = true;
        if (i % 2) {
            params.temperature = 0.9f;
            params.seed = uint64_t(random_.integer(0, 1 << 30));
        }
        const int64_t id = engine.add_request(
            prompt, params, 0,
            [&streamed, i](TokenId, const std::string& piece) { streamed[i] += piece; });
        ASSERT_EQ(id, i);
        prompts[id] = prompt;
        params_of[id] = params;
    }
    std::map<int64_t, GenerationResult> results;
    int64_t preempted = 0;
    for (int step = 0; engine.has_unfinished(); ++step) {
        ASSERT_LT(step, 10'000) << "no progress";
        StepOutput out = engine.step();
        preempted += out.num_preempted;
        EXPECT_LE(out.num_batched_tokens, 40);
        for (FinishedRequest& f : out.finished) results[f.request_id] = std::move(f.result);
    }
    ASSERT_EQ(results.size(), 16u);
    for (const auto& [id, result] : results) {
        const GenerationResult expected = solo(prompts[id], params_of[id]);
        EXPECT_EQ(result.tokens, expected.tokens) << "request " << id;
        EXPECT_EQ(result.text, expected.text) << "request " << id;
        EXPECT_EQ(streamed[id], result.text) << "request " << id;
        EXPECT_EQ(result.finish_reason, FinishReason::kLength);
    }
    EXPECT_GT(preempted, 0) << "the pool was meant to force preemption";
    EXPECT_EQ(free_after_evicting(engine), 24);
}

TEST_F(EngineTest, CancelEndsARequestAndReturnsItsBlocks) {
    EngineConfig config;
    config.num_kv_blocks = 32;
    config.block_size = 4;
    Engine engine(*model_, *runner_, config);
    SamplingParams params;
    params.max_tokens = 50;
    params.ignore_eos = true;
    const int64_t keep = engine.add_request(random_prompt(10), params);
    const int64_t drop = engine.add_request(random_prompt(10), params);
    engine.step();
    engine.step();
    EXPECT_TRUE(engine.cancel(drop));
    EXPECT_FALSE(engine.cancel(drop));
    EXPECT_FALSE(engine.cancel(12345));
    const StepOutput out = engine.step();
    ASSERT_EQ(out.finished.size(), 1u);
    EXPECT_EQ(out.finished[0].request_id, drop);
    EXPECT_EQ(out.finished[0].result.finish_reason, FinishReason::kCancelled);
    EXPECT_EQ(out.finished[0].result.tokens.size(), 2u);
    for (const TokenEvent& e : out.tokens) EXPECT_EQ(e.request_id, keep);
    EXPECT_TRUE(engine.cancel(keep));
    engine.step();
    EXPECT_FALSE(engine.has_unfinished());
    EXPECT_EQ(free_after_evicting(engine), 32);
}

TEST_F(EngineTest, GenerateRunsABatchAndKeepsItsOrder) {
    SCOPED_TRACE(random_.trace());
    Engine engine(*model_, *runner_, EngineConfig{});
    SamplingParams params;
    params.max_tokens = 8;
    params.ignore_eos = true;
    std::vector<std::vector<TokenId>> prompts;
    for (int i = 0; i < 5; ++i) prompts.push_back(random_prompt(random_.integer(1, 30)));
    const std::vector<GenerationResult> results = engine.generate(prompts, params);
    ASSERT_EQ(results.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(results[i].prompt_tokens, prompts[i]);
        EXPECT_EQ(results[i].tokens, solo(prompts[i], params).tokens) << "prompt " << i;
    }
}

TEST_F(EngineTest, RejectsRequestsItCouldNeverRun) {
    EngineConfig config;
    config.num_kv_blocks = 4;
    config.block_size = 4;
    Engine engine(*model_, *runner_, config);
    SamplingParams params;
    params.max_tokens = 4;
    EXPECT_THROW(engine.add_request({}, params), Error);
    EXPECT_THROW(engine.add_request({TokenId(model_->config.vocab_size)}, params), Error);
    EXPECT_THROW(engine.add_request(random_prompt(14), params), Error);  // 18 tokens > 16 slots
    SamplingParams bad = params;
    bad.temperature = -1.0f;
    EXPECT_THROW(engine.add_request(random_prompt(4), bad), Error);
    EXPECT_FALSE(engine.has_unfinished());
    EXPECT_EQ(engine.add_request(random_prompt(12), params), 0);  // ids are not used up
    // ... and one that just fits (16 slots) runs to the end.
    const StepOutput first = engine.step();
    EXPECT_EQ(first.num_batched_tokens, 12);
    while (engine.has_unfinished()) engine.step();
    EXPECT_EQ(free_after_evicting(engine), 4);
}

TEST_F(EngineTest, ATextPromptFromTheFrontDoorRunsAsItsIds) {
    Engine engine(*model_, *runner_, EngineConfig{});
    SamplingParams params;
    params.max_tokens = 6;
    params.ignore_eos = true;
    RequestSpec spec;
    spec.text = "hello there";
    spec.params = params;
    std::vector<TokenId> ids = model_->tokenizer.encode(spec.text, false);
    if (model_->tokenizer.add_bos() && model_->tokenizer.bos_id() >= 0) {
        ids.insert(ids.begin(), model_->tokenizer.bos_id());
    }
    const EngineRequest request = RequestBuilder(*model_).build(spec);
    EXPECT_EQ(request.prompt, ids);
    engine.add_parallel_request(request.prompt, request.params, request.num_completions);
    GenerationResult result;
    while (engine.has_unfinished()) {
        for (FinishedRequest& f : engine.step().finished) result = std::move(f.result);
    }
    EXPECT_EQ(result.prompt_tokens, ids);
    EXPECT_EQ(result.tokens, solo(ids, params).tokens);
}

TEST_F(EngineTest, StaticBatchingKeepsTheBatchUntilItsSlowestRequestEnds) {
    SCOPED_TRACE(random_.trace());
    EngineConfig config;
    config.num_kv_blocks = 64;
    config.block_size = 4;
    config.scheduler.max_num_seqs = 3;
    config.scheduler.static_batching = true;
    Engine engine(*model_, *runner_, config);
    std::map<int64_t, std::vector<TokenId>> prompts;
    std::map<int64_t, SamplingParams> params_of;
    for (int i = 0; i < 7; ++i) {
        SamplingParams params;
        params.max_tokens = int32_t(random_.integer(2, 20));
        params.ignore_eos = true;
        const std::vector<TokenId> prompt = random_prompt(random_.integer(1, 20));
        const int64_t id = engine.add_request(prompt, params);
        prompts[id] = prompt;
        params_of[id] = params;
    }
    // Batches are requests {0,1,2}, {3,4,5}, {6}: each starts when the last
    // has completely ended, and until then computes one row per member,
    // finished or not.
    std::map<int64_t, GenerationResult> results;
    std::map<int64_t, int64_t> first_step, last_step;
    for (int64_t step = 0; engine.has_unfinished(); ++step) {
        ASSERT_LT(step, 1000) << "no progress";
        StepOutput out = engine.step();
        for (const TokenEvent& e : out.tokens) {
            if (!first_step.contains(e.request_id)) first_step[e.request_id] = step;
            last_step[e.request_id] = step;
        }
        const int64_t batch = first_step.empty() ? 0 : std::prev(first_step.end())->first / 3;
        int64_t batch_size = std::min<int64_t>(3, 7 - 3 * batch);
        // Every step after the prefill computes exactly one token per row.
        const bool decode_step = out.num_prefill_tokens == 0;
        if (decode_step) {
            EXPECT_EQ(out.num_batched_tokens, batch_size) << "step " << step;
        }
        for (FinishedRequest& f : out.finished) results[f.request_id] = std::move(f.result);
    }
    for (int64_t batch_start : {3, 6}) {
        int64_t previous_end = 0;
        for (int64_t id = batch_start - 3; id < batch_start; ++id) {
            previous_end = std::max(previous_end, last_step[id]);
        }
        EXPECT_GT(first_step[batch_start], previous_end) << "batch " << batch_start / 3;
    }
    ASSERT_EQ(results.size(), 7u);
    for (const auto& [id, result] : results) {
        EXPECT_EQ(result.tokens, solo(prompts[id], params_of[id]).tokens) << "request " << id;
    }
    EXPECT_EQ(free_after_evicting(engine), 64);
}

TEST_F(EngineTest, ParallelSamplingSurvivesCancellingEitherSide) {
    SCOPED_TRACE(random_.trace());
    EngineConfig config;
    config.num_kv_blocks = 64;
    config.block_size = 4;
    config.scheduler.max_num_batched_tokens = 8;  // the prompt takes several steps
    Engine engine(*model_, *runner_, config);
    SamplingParams params;
    params.max_tokens = 10;
    params.ignore_eos = true;
    params.temperature = 0.8f;
    params.seed = uint64_t(random_.integer(0, 1 << 30));
    const std::vector<TokenId> prompt = random_prompt(30);
    // Cancel the first completion while its prompt is half computed: the
    // others compute it themselves. Cancel one waiting sibling: it just goes.
    const std::vector<int64_t> ids = engine.add_parallel_request(prompt, params, 4);
    engine.step();
    EXPECT_TRUE(engine.cancel(ids[0]));
    EXPECT_TRUE(engine.cancel(ids[2]));
    std::map<int64_t, GenerationResult> results;
    while (engine.has_unfinished()) {
        for (FinishedRequest& f : engine.step().finished)
            results[f.request_id] = std::move(f.result);
    }
    ASSERT_EQ(results.size(), 4u);
    EXPECT_EQ(results[ids[0]].finish_reason, FinishReason::kCancelled);
    EXPECT_EQ(results[ids[2]].finish_reason, FinishReason::kCancelled);
    for (int i : {1, 3}) {
        SamplingParams own = params;
        own.seed = params.seed + uint64_t(i);
        EXPECT_EQ(results[ids[size_t(i)]].tokens, solo(prompt, own).tokens) << "completion " << i;
    }
    EXPECT_EQ(free_after_evicting(engine), 64);
}

}  // namespace
}  // namespace servelab
