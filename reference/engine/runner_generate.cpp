// runner_generate.cpp — see runner_generate.h.
#include "reference/engine/runner_generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "kernels/common/error.h"
#include "reference/engine/generation_common.h"
#include "reference/kv/kv_block_manager.h"

namespace servelab {
namespace {

int64_t blocks_for(int64_t tokens, int64_t block_size) {
    return (tokens + block_size - 1) / block_size;
}

// One step: the tokens of `sequence` not in `kv_sequence` yet, then one sample.
TokenId step_and_sample(StepRunner& runner, PagedKvCache& pool, KvBlockManager& kv,
                        PagedSequence& kv_sequence, std::span<const TokenId> sequence,
                        Sampler& sampler) {
    const int64_t start = kv_sequence.num_computed_tokens;
    const int64_t count = int64_t(sequence.size()) - start;
    if (!kv.reserve(kv_sequence, count)) throw Error("generate: the request's pool is full");
    const SequenceChunk chunk{StepInput{sequence.subspan(size_t(start)), start},
                              &kv_sequence.table};
    const SampleRequest sample{0, &sampler, sequence};
    const TokenId token =
        runner.run_step({std::span(&chunk, 1), {}, std::span(&sample, 1), {}}, pool).sampled[0];
    kv.commit(kv_sequence, sequence);
    return token;
}

}  // namespace

GenerationResult generate_on_runner(StepRunner& runner, const Model& model,
                                    std::span<const TokenId> prompt_tokens,
                                    const SamplingParams& params, RunnerLayout layout,
                                    int64_t block_size, const TokenCallback& on_token) {
    params.validate();
    runner.check_sampling(params);
    const ModelConfig& config = model.config;
    check_prompt(prompt_tokens, config);
    const int64_t capacity =
        std::min<int64_t>(config.context_length, int64_t(prompt_tokens.size()) + params.max_tokens);

    GenerationResult result;
    result.prompt_tokens.assign(prompt_tokens.begin(), prompt_tokens.end());
    std::vector<TokenId> sequence = result.prompt_tokens;
    Sampler sampler(params);
    StopChecker stop(model.tokenizer, params);
    const auto start = std::chrono::steady_clock::now();

    // Contiguous: the request's whole pool, up front. Naive: a new one each step.
    std::optional<PagedKvCache> pool;
    std::optional<KvBlockManager> kv;
    std::optional<PagedSequence> kv_sequence;
    const auto fresh_pool = [&](int64_t tokens) {
        kv_sequence.reset();
        kv.reset();
        pool.emplace(config, blocks_for(tokens, block_size), block_size, runner.kv_storage());
        kv.emplace(*pool, /*enable_prefix_caching=*/false);
        kv_sequence.emplace(kv->start({}));
    };
    if (layout == RunnerLayout::kContiguous) fresh_pool(capacity);

    while (true) {
        const auto step_start = std::chrono::steady_clock::now();
        if (layout == RunnerLayout::kNaive) fresh_pool(int64_t(sequence.size()));
        const TokenId token = step_and_sample(runner, *pool, *kv, *kv_sequence, sequence, sampler);
        if (emit_token(token, elapsed_ms(step_start), capacity, sequence, result, stop, on_token)) {
            break;
        }
    }
    result.text = stop.text();
    result.timings.total_ms = elapsed_ms(start);
    return result;
}

}  // namespace servelab
