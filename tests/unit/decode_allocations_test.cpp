// decode_allocations_test.cpp — issue 11: a steady decode step allocates nothing.
//
// Every buffer a step needs is sized by the first, largest step and then
// reused: the runner's activations and logits, the kernels' per-thread
// scratch, fast mode's quantized activations. What a heap allocation costs
// is not the point (a few hundred ns); a decode loop that allocates is one
// whose memory use nobody planned. This binary counts every operator new
// (replaced below) while a decode step runs.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "kernels/cpu/quant_matmul_repacked.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/sampling/sampler.h"
#include "tests/unit/engine_test_util.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};
}  // namespace

// Replaceable global allocation functions ([new.delete.single]): the whole
// test binary allocates through these.
void* operator new(std::size_t size) {
    if (counting.load(std::memory_order_relaxed)) {
        allocations.fetch_add(1, std::memory_order_relaxed);
    }
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}

namespace servelab {
namespace {

class DecodeAllocations : public test::TinyModelTest,
                          public ::testing::WithParamInterface<std::pair<GgmlType, MatmulMode>> {};

TEST_P(DecodeAllocations, SteadyDecodeStepsAllocateOnlyTheirResult) {
    SCOPED_TRACE(random_.trace());
    const auto [weight_type, mode] = GetParam();
    load_tiny_model(
        {.num_heads = 4, .num_kv_heads = 2, .context_length = 256, .weight_type = weight_type});
    model_->weights.set_matmul_mode(mode);
    if (mode == MatmulMode::kFast && cpu_runs_repacked()) {
        // The fast cases must cover the repacked kernels and the fused Q/K/V pass.
        ASSERT_TRUE(model_->weights.layers[0].wq.is_repacked());
        ASSERT_TRUE(model_->weights.layers[0].wk.is_repacked());
    }
    PagedKvCache pool(model_->config, 256, 16);
    KvBlockManager kv(pool, false);
    SamplingParams params;
    params.temperature = 0.8f;
    params.top_k = 20;
    params.seed = uint64_t(random_.seed());
    Sampler sampler(params);
    // Two sequences, one after the other, to the same length: the first
    // sizes every buffer and scratch (they only grow), the second is the
    // steady state, where each decode step must allocate nothing but its
    // StepResult's vector of sampled tokens.
    const int64_t final_length = random_.integer(60, 120);
    for (const bool steady : {false, true}) {
        std::vector<TokenId> tokens = random_prompt(random_.integer(8, 40));
        tokens.reserve(size_t(final_length));
        PagedSequence sequence = kv.start(tokens);
        while (int64_t(tokens.size()) < final_length) {
            const int64_t count = int64_t(tokens.size()) - sequence.num_computed_tokens;
            ASSERT_TRUE(kv.reserve(sequence, count));
            const SequenceChunk chunk{
                StepInput{std::span(tokens).subspan(size_t(sequence.num_computed_tokens)),
                          sequence.num_computed_tokens},
                &sequence.table};
            const SampleRequest sample{0, &sampler, tokens};
            const StepBatch batch{.chunks = std::span(&chunk, 1), .samples = std::span(&sample, 1)};
            const bool decode = count == 1;
            allocations = 0;
            counting = steady && decode;
            StepResult result = runner_->run_step(batch, pool);
            counting = false;
            if (steady && decode) {
                EXPECT_LE(allocations.load(), 1) << "decode step at " << tokens.size();
            }
            kv.commit(sequence, tokens);
            tokens.push_back(result.sampled.at(0));
        }
        kv.finish(sequence);
    }
}

INSTANTIATE_TEST_SUITE_P(WeightsAndModes, DecodeAllocations,
                         ::testing::Values(std::pair{GgmlType::kF32, MatmulMode::kExact},
                                           std::pair{GgmlType::kQ4_1, MatmulMode::kExact},
                                           std::pair{GgmlType::kQ4_1, MatmulMode::kFast},
                                           std::pair{GgmlType::kQ8_0, MatmulMode::kFast}),
                         [](const auto& info) {
                             return std::string(ggml_type_traits(info.param.first).name) +
                                    (info.param.second == MatmulMode::kFast ? "_fast" : "_exact");
                         });

}  // namespace
}  // namespace servelab
