// cuda_runner_test.cpp — the GPU runner and engine against the CPU ones.
//
// CUDA backend (issue 7). Built only with nvcc; without a usable GPU every
// test reports skipped with the runtime's reason. Two levels:
//   logits: the CUDA runner's forward pass over batches of prefill chunks
//     (some starting after cached tokens) and decode steps (through CUDA
//     graphs and without) equals the CPU runner's, on a random tiny model
//     whose CPU copy has its weights rounded to bf16 as the GPU's are, so
//     what remains is the bf16 rounding of activations (docs/correctness.md:
//     per row, ||gpu - cpu|| <= 3e-2 ||cpu||);
//   tokens: the same Engine, continuous batching and all, gives the same
//     greedy tokens on either device, up to near-ties: where they first
//     differ, the CPU's logits for the two tokens must be within 2% of the
//     row's range (the GPU's bf16 rounding can flip only such a choice). On
//     the tiny model and, when data/models holds it, on SmolLM2 with the
//     golden prompts.
#include <gtest/gtest.h>

#ifdef SERVELAB_HAVE_CUDA
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "kernels/common/error.h"
#include "kernels/cuda/device_info.h"
#include "reference/device/cuda_model_runner.h"
#include "reference/device/cuda_weights.h"
#include "reference/engine/engine.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "tests/unit/cuda_test_util.h"

namespace servelab {
namespace {

void round_to_bf16(std::vector<float>& values) {
    for (float& v : values) v = __bfloat162float(__float2bfloat16(v));
}

// A matrix's values rounded to bf16, held as fp32.
void round_to_bf16(WeightMatrix& matrix) {
    if (matrix.empty()) return;
    std::vector<float> values = matrix.to_floats();
    round_to_bf16(values);
    matrix = WeightMatrix::from_floats(std::move(values), matrix.rows(), matrix.cols());
}

// The weights the GPU computes with, as fp32: every tensor rounded to bf16.
ModelWeights bf16_rounded(const ModelWeights& weights) {
    ModelWeights out = weights;
    round_to_bf16(out.output_norm);
    for (WeightMatrix* m : {&out.token_embedding, &out.output}) round_to_bf16(*m);
    for (LayerWeights& l : out.layers) {
        for (auto* t : {&l.attn_norm, &l.ffn_norm}) round_to_bf16(*t);
        for (auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
            round_to_bf16(*m);
        }
    }
    return out;
}

double relative_error(std::span<const float> gpu, std::span<const float> cpu) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        diff += (double(gpu[i]) - cpu[i]) * (double(gpu[i]) - cpu[i]);
        norm += double(cpu[i]) * cpu[i];
    }
    return std::sqrt(diff / std::max(norm, 1e-30));
}

// Whether choosing `other` over `chosen` is a near-tie in `logits`.
bool near_tie(std::span<const float> logits, TokenId chosen, TokenId other) {
    const auto [lo, hi] = std::minmax_element(logits.begin(), logits.end());
    return logits[size_t(chosen)] - logits[size_t(other)] <= 0.02f * (*hi - *lo);
}

class CudaRunner : public test::CudaTest {
  protected:
    void load_tiny(TinyModelOptions options) {
        options.seed = random_.seed();
        bytes_ = make_tiny_model(options);
        model_ = std::make_unique<Model>(Model::from_gguf(GgufFile::parse(bytes_)));
        cpu_weights_ = bf16_rounded(model_->weights);
    }
    std::vector<TokenId> random_prompt(int64_t length) {
        std::vector<TokenId> prompt;
        for (int64_t i = 0; i < length; ++i)
            prompt.push_back(TokenId(random_.integer(0, model_->config.vocab_size - 1)));
        return prompt;
    }

    // Greedy tokens of every prompt through an Engine on `runner`.
    std::vector<std::vector<TokenId>> engine_greedy(
        StepRunner& runner, const std::vector<std::vector<TokenId>>& prompts, int32_t max_tokens,
        int64_t num_blocks, int64_t block_size) {
        EngineConfig config;
        config.num_kv_blocks = num_blocks;
        config.block_size = block_size;
        config.scheduler.max_num_batched_tokens = 64;  // several chunks per prompt
        Engine engine(*model_, runner, config);
        SamplingParams params;
        params.max_tokens = max_tokens;
        params.ignore_eos = true;
        std::vector<std::vector<TokenId>> out;
        for (GenerationResult& r : engine.generate(prompts, params)) out.push_back(r.tokens);
        return out;
    }

    // The CPU's logits for the next token after `sequence` (naive forward).
    std::vector<float> cpu_next_logits(ModelRunner& cpu, std::span<const TokenId> sequence) {
        return cpu.forward(StepInput{sequence, 0, LogitsFor::kLastToken});
    }

    // Checks GPU greedy tokens against the CPU's, up to near-ties; returns
    // how many tokens agreed before the first divergence, over all prompts.
    int64_t expect_equal_up_to_near_ties(ModelRunner& cpu,
                                         const std::vector<std::vector<TokenId>>& prompts,
                                         const std::vector<std::vector<TokenId>>& cpu_tokens,
                                         const std::vector<std::vector<TokenId>>& gpu_tokens) {
        int64_t agreed = 0;
        for (size_t p = 0; p < prompts.size(); ++p) {
            const auto& want = cpu_tokens[p];
            const auto& got = gpu_tokens[p];
            EXPECT_EQ(got.size(), want.size()) << "prompt " << p;
            size_t i = 0;
            while (i < std::min(got.size(), want.size()) && got[i] == want[i]) ++i;
            agreed += int64_t(i);
            if (i == std::min(got.size(), want.size())) continue;
            std::vector<TokenId> sequence = prompts[p];
            sequence.insert(sequence.end(), want.begin(), want.begin() + std::ptrdiff_t(i));
            const std::vector<float> logits = cpu_next_logits(cpu, sequence);
            EXPECT_TRUE(near_tie(logits, want[i], got[i]))
                << "prompt " << p << " token " << i << ": cpu " << want[i] << " ("
                << logits[size_t(want[i])] << "), gpu " << got[i] << " (" << logits[size_t(got[i])]
                << ") is no near-tie";
        }
        return agreed;
    }

    // The CUDA runner's logits against `cpu`'s over batches of prefill chunks
    // and decode steps, with CUDA graphs and without: per row,
    // ||gpu - cpu|| <= tolerance ||cpu||. `base` gives the runner's other options.
    void expect_logits_match(ModelRunner& cpu, CudaRunnerOptions base, double tolerance) {
        const ModelConfig& c = model_->config;
        for (bool graphs : {true, false}) {
            SCOPED_TRACE(graphs ? "with CUDA graphs" : "without CUDA graphs");
            const int64_t num_blocks = 64, block_size = 7;  // 7: chunks end mid-block
            CudaRunnerOptions options = base;
            options.num_kv_blocks = num_blocks;
            options.block_size = block_size;
            options.max_tokens_per_step = 32;
            options.cuda_graphs = graphs;
            CudaModelRunner gpu(c, model_->weights, options);
            PagedKvCache cpu_pool(c, num_blocks, block_size);
            PagedKvCache gpu_pool(c, num_blocks, block_size, KvStorage::kDevice);
            // One set of block tables for both pools: block ids mean the same rows.
            KvBlockManager kv(cpu_pool, /*enable_prefix_caching=*/false);
            std::vector<std::vector<TokenId>> sequences = {random_prompt(40), random_prompt(5),
                                                           random_prompt(1)};
            std::vector<PagedSequence> seqs;
            for (size_t s = 0; s < sequences.size(); ++s) seqs.push_back(kv.start(sequences[s]));

            // Each step: per sequence, how many of its uncomputed tokens to run.
            // Step 0: prefill chunks; step 1: the rest of a prompt beside a
            // decode token; then decode-only steps (a graph's bucket of 4 for 3).
            const std::vector<std::vector<int64_t>> schedule = {{25, 5, 1}, {15, 1, 1}, {1, 1, 1},
                                                                {1, 1, 1},  {1, 1, 1},  {1, 1, 1}};
            for (size_t step = 0; step < schedule.size(); ++step) {
                std::vector<SequenceChunk> chunks;
                for (size_t s = 0; s < seqs.size(); ++s) {
                    const int64_t start = seqs[s].num_computed_tokens;
                    const int64_t count = schedule[step][s];
                    if (start + count > int64_t(sequences[s].size())) {
                        sequences[s].push_back(TokenId(random_.integer(0, c.vocab_size - 1)));
                    }
                    ASSERT_TRUE(kv.reserve(seqs[s], count));
                    chunks.push_back(
                        {StepInput{std::span(sequences[s]).subspan(size_t(start), size_t(count)),
                                   start},
                         &seqs[s].table});
                }
                const std::vector<float> want = cpu.forward_batch(chunks, cpu_pool);
                const std::vector<float> got = gpu.forward_logits({chunks, {}, {}, {}}, gpu_pool);
                ASSERT_EQ(got.size(), want.size());
                const size_t vocab = size_t(c.vocab_size);
                for (size_t s = 0; s < chunks.size(); ++s) {
                    const auto w = std::span(want).subspan(s * vocab, vocab);
                    const auto g = std::span(got).subspan(s * vocab, vocab);
                    EXPECT_LT(relative_error(g, w), tolerance)
                        << "step " << step << " sequence " << s;
                }
                for (size_t s = 0; s < seqs.size(); ++s) kv.commit(seqs[s], sequences[s]);
            }
            if (graphs) {
                EXPECT_EQ(gpu.num_graphs_captured(), 1);  // the bucket of 4
                EXPECT_EQ(gpu.num_graph_launches(), 3);   // every decode step after the first
            }
        }
    }

    std::vector<uint8_t> bytes_;
    std::unique_ptr<Model> model_;
    ModelWeights cpu_weights_;
};

TEST_F(CudaRunner, LogitsEqualTheCpuRunnerOverPrefillChunksAndDecodeSteps) {
    SCOPED_TRACE(random_.trace());
    load_tiny({.num_layers = 2, .dim = 96, .num_heads = 6, .num_kv_heads = 2, .ffn_dim = 160});
    ModelRunner cpu(model_->config, cpu_weights_);
    expect_logits_match(cpu, {}, 3e-2);
}

// Native weights (issue 48): the Q4_0/Q4_1/Q8_0 projections stay blocks on
// the GPU, so the CPU runner keeps the same blocks (its exact mode: fp32
// activations against the dequantized weights) and only the tensors the
// GPU holds in bf16 (embedding, norms) are rounded. The schedule runs both
// native paths: prefill chunks of 15-25 tokens through dequantize + cuBLAS,
// decode steps of 3-4 sequences through the quantized GEMV, whose int8
// activations add about 0.5% of rounding per projection to the bf16
// activations' 3e-2 (quant_gemv.h); hence 5e-2. The head is untied and
// quantized, so it is a native matrix too. The Q4_1 model with
// GpuWeights::kBf16 keeps issue 7's bound against bf16-rounded weights.
TEST_F(CudaRunner, NativeQuantizedWeightsGiveTheCpuRunnersLogits) {
    SCOPED_TRACE(random_.trace());
    for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ4_0, GgmlType::kQ8_0}) {
        SCOPED_TRACE(std::string(ggml_type_traits(type).name));
        load_tiny({.num_layers = 2,
                   .dim = 96,
                   .num_heads = 6,
                   .num_kv_heads = 2,
                   .ffn_dim = 160,
                   .weight_type = type,
                   .tied_embeddings = false});
        ModelWeights native_cpu = model_->weights;
        round_to_bf16(native_cpu.output_norm);
        round_to_bf16(native_cpu.token_embedding);
        for (LayerWeights& l : native_cpu.layers) {
            for (auto* t : {&l.attn_norm, &l.ffn_norm}) round_to_bf16(*t);
        }
        ModelRunner cpu(model_->config, native_cpu);
        expect_logits_match(cpu, {.weights = GpuWeights::kNative}, 5e-2);
        if (type == GgmlType::kQ4_1) {  // once: the bf16 path does not depend on the format
            ModelRunner cpu_bf16(model_->config, cpu_weights_);
            expect_logits_match(cpu_bf16, {.weights = GpuWeights::kBf16}, 3e-2);
        }
    }
}

// Heads 64 wide: the prefill chunks run on the tensor-core kernel
// (paged_prefill_attention_mma.h), or on the scalar one when it is forced.
TEST_F(CudaRunner, LogitsEqualTheCpuRunnerWithTensorCoreOrScalarPrefill) {
    SCOPED_TRACE(random_.trace());
    load_tiny({.num_layers = 2, .dim = 128, .num_heads = 2, .num_kv_heads = 1, .ffn_dim = 160});
    ASSERT_EQ(model_->config.head_dim, 64);
    ModelRunner cpu(model_->config, cpu_weights_);
    for (bool tensor_cores : {true, false}) {
        SCOPED_TRACE(tensor_cores ? "tensor-core prefill" : "scalar prefill (forced)");
        expect_logits_match(cpu, {.tensor_core_prefill = tensor_cores}, 3e-2);
    }
}

TEST_F(CudaRunner, NativeWeightsHoldTheFilesBytesForQuantizedProjections) {
    SCOPED_TRACE(random_.trace());
    load_tiny({.num_layers = 2,
               .dim = 96,
               .num_heads = 6,
               .num_kv_heads = 2,
               .ffn_dim = 160,
               .weight_type = GgmlType::kQ4_1,
               .tied_embeddings = false});
    for (GpuWeights kind : {GpuWeights::kNative, GpuWeights::kBf16}) {
        int64_t want = 0;  // what the CLI sizes the KV pool beside (cuda_tensor_bytes)
        for (const GgufTensorInfo& tensor : model_->file.tensors()) {
            want += cuda_tensor_bytes(tensor.type, tensor.num_elements(),
                                      tensor.name == "token_embd.weight", kind);
        }
        CudaModelRunner gpu(model_->config, model_->weights,
                            {.num_kv_blocks = 16, .block_size = 16, .weights = kind});
        EXPECT_EQ(gpu.weight_bytes(), want) << gpu_weights_name(kind);
    }
}

TEST_F(CudaRunner, EngineGreedyTokensEqualTheCpuEngineUpToNearTies) {
    SCOPED_TRACE(random_.trace());
    load_tiny({.num_layers = 2, .dim = 64, .num_heads = 4, .num_kv_heads = 2, .ffn_dim = 128});
    const ModelConfig& c = model_->config;
    std::vector<std::vector<TokenId>> prompts;
    for (int64_t length : {1, 9, 16, 17, 40, 70}) prompts.push_back(random_prompt(length));
    ModelRunner cpu(c, cpu_weights_);
    const int64_t num_blocks = 128, block_size = 16;
    const auto want = engine_greedy(cpu, prompts, 24, num_blocks, block_size);
    CudaModelRunner gpu(c, model_->weights,
                        {.num_kv_blocks = num_blocks, .block_size = block_size});
    const auto got = engine_greedy(gpu, prompts, 24, num_blocks, block_size);
    expect_equal_up_to_near_ties(cpu, prompts, want, got);
    EXPECT_GT(gpu.num_graph_launches(), 0);
}

TEST_F(CudaRunner, LogprobsOfTheGpusTokensAreTheCpusDistribution) {
    SCOPED_TRACE(random_.trace());
    load_tiny({.num_layers = 2, .dim = 64, .num_heads = 4, .num_kv_heads = 2, .ffn_dim = 128});
    const ModelConfig& c = model_->config;
    ModelRunner cpu(c, cpu_weights_);
    CudaModelRunner gpu(c, model_->weights, {.num_kv_blocks = 64, .block_size = 16});
    EngineConfig config;
    config.num_kv_blocks = 64;
    config.block_size = 16;
    Engine engine(*model_, gpu, config);
    for (const float temperature : {0.0f, 0.7f}) {
        SamplingParams params;
        params.max_tokens = 8;
        params.ignore_eos = true;
        params.temperature = temperature;
        params.seed = 11;
        params.logprobs = 3;
        const std::vector<TokenId> prompt = random_prompt(20);
        const GenerationResult result = engine.generate({prompt}, params).at(0);
        ASSERT_EQ(result.logprobs.size(), result.tokens.size())
            << "the GPU runner must return logprobs for every token of a request that asks";
        std::vector<TokenId> sequence = prompt;
        for (size_t i = 0; i < result.tokens.size(); ++i) {
            const SampledLogprobs& lp = result.logprobs[i];
            EXPECT_EQ(lp.chosen.token, result.tokens[i]);
            ASSERT_EQ(lp.top.size(), 3u);
            // The CPU's log-softmax of (logits / T) for the same sequence
            // (bf16 weights on both sides; the GPU's activations are bf16).
            const std::vector<float> logits = cpu_next_logits(cpu, sequence);
            const double scale = temperature > 0.0f ? temperature : 1.0;
            double max_logit = -INFINITY, sum = 0.0;
            for (const float l : logits) max_logit = std::max(max_logit, l / scale);
            for (const float l : logits) sum += std::exp(l / scale - max_logit);
            const double want =
                logits[size_t(result.tokens[i])] / scale - max_logit - std::log(sum);
            EXPECT_NEAR(lp.chosen.logprob, want, 0.05 + 0.02 * std::fabs(want))
                << "temperature " << temperature << ", token " << i;
            sequence.push_back(result.tokens[i]);
        }
    }
}

TEST_F(CudaRunner, ParallelSamplingForksBlocksAndCopiesOnWrite) {
    SCOPED_TRACE(random_.trace());
    load_tiny({.num_layers = 2, .dim = 64, .num_heads = 4, .num_kv_heads = 2, .ffn_dim = 128});
    const ModelConfig& c = model_->config;
    // 21 tokens in blocks of 8: the completions share a half-full last
    // block, so each one's first write copies it on the device.
    const std::vector<TokenId> prompt = random_prompt(21);
    CudaModelRunner gpu(c, model_->weights, {.num_kv_blocks = 64, .block_size = 8});
    ModelRunner cpu(c, cpu_weights_);
    SamplingParams greedy;
    greedy.max_tokens = 12;
    greedy.ignore_eos = true;
    EngineConfig config;
    config.num_kv_blocks = 64;
    config.block_size = 8;
    Engine gpu_engine(*model_, gpu, config);
    Engine cpu_engine(*model_, cpu, config);
    const auto gpu_results = gpu_engine.generate_parallel(prompt, greedy, 3);
    const auto cpu_results = cpu_engine.generate_parallel(prompt, greedy, 3);
    std::vector<std::vector<TokenId>> prompts(3, prompt), want, got;
    for (int i = 0; i < 3; ++i) {
        want.push_back(cpu_results[size_t(i)].tokens);
        got.push_back(gpu_results[size_t(i)].tokens);
        // A wrong copy-on-write shows up as completions that differ.
        EXPECT_EQ(got[size_t(i)], got[0]) << "completion " << i;
    }
    expect_equal_up_to_near_ties(cpu, prompts, want, got);

    // Sampled: the same seeds give the same tokens, run after run.
    SamplingParams sampled = greedy;
    sampled.temperature = 0.9f;
    sampled.top_k = 20;
    sampled.top_p = 0.9f;
    sampled.seed = uint64_t(random_.integer(0, 1 << 30));
    const auto first = gpu_engine.generate_parallel(prompt, sampled, 3);
    const auto second = gpu_engine.generate_parallel(prompt, sampled, 3);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(first[i].tokens, second[i].tokens) << "completion " << i;
        for (TokenId t : first[i].tokens) EXPECT_TRUE(t >= 0 && t < c.vocab_size);
    }
}

TEST_F(CudaRunner, RefusesAPoolItDoesNotMirror) {
    load_tiny({});
    CudaModelRunner gpu(model_->config, model_->weights, {.num_kv_blocks = 16, .block_size = 4});
    PagedKvCache host_pool(model_->config, 16, 4);  // host storage
    KvBlockManager kv(host_pool, false);
    std::vector<TokenId> prompt = random_prompt(3);
    PagedSequence seq = kv.start(prompt);
    ASSERT_TRUE(kv.reserve(seq, 3));
    const SequenceChunk chunk{StepInput{prompt, 0}, &seq.table};
    EXPECT_THROW(gpu.forward_logits({std::span(&chunk, 1), {}, {}, {}}, host_pool), Error);
}

TEST_F(CudaRunner, SmolLm2GoldenPromptsAgreeWithTheCpuEngineUpToNearTies) {
    const std::string path = test::source_path(test::kSmolLm2Path);
    if (!std::ifstream(path)) GTEST_SKIP() << "no " << path << " (make model downloads it)";
    Model model = Model::load(path);
    std::ifstream golden_file(test::source_path("data/golden/llamacpp_greedy.json"));
    const nlohmann::json golden = nlohmann::json::parse(golden_file);
    std::vector<std::vector<TokenId>> prompts;
    for (const auto& p : golden["prompts"])
        prompts.push_back(p["prompt_ids"].get<std::vector<TokenId>>());

    model_ = std::make_unique<Model>(std::move(model));
    ModelRunner cpu(model_->config, model_->weights);  // the CPU engine as users run it
    const auto want = engine_greedy(cpu, prompts, 16, 1024, 16);
    CudaModelRunner gpu(model_->config, model_->weights, {.num_kv_blocks = 1024, .block_size = 16});
    const auto got = engine_greedy(gpu, prompts, 16, 1024, 16);
    const int64_t agreed = expect_equal_up_to_near_ties(cpu, prompts, want, got);
    std::printf(
        "SmolLM2 on the GPU: %lld of %zu greedy tokens equal the CPU's before the first "
        "divergence\n",
        (long long)agreed, prompts.size() * 16);
}

}  // namespace
}  // namespace servelab

#endif  // SERVELAB_HAVE_CUDA
