// kv_quality.cpp — see kv_quality.h.
#include "reference/engine/kv_quality.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/error.h"
#include "reference/engine/generator.h"
#include "reference/sampling/sampling_filters.h"

namespace servelab {
namespace {

// Logits after each of the last `steps` tokens of `sequence` (and after the
// prompt), computed as decoding does: prefill the prompt, then one token per step.
std::vector<std::vector<float>> stepwise_logits(ModelRunner& runner, const ModelConfig& config,
                                                std::span<const TokenId> sequence,
                                                int64_t prompt_tokens, KvDtype dtype) {
    KvCache cache(config, int64_t(sequence.size()), dtype);
    std::vector<std::vector<float>> logits;
    logits.push_back(runner.forward({sequence.first(size_t(prompt_tokens)), 0}, &cache));
    for (int64_t position = prompt_tokens; position < int64_t(sequence.size()); ++position) {
        logits.push_back(runner.forward({sequence.subspan(size_t(position), 1), position}, &cache));
    }
    return logits;
}

std::vector<TokenId> greedy_tokens(ModelRunner& runner, const ModelConfig& config,
                                   const Tokenizer& tokenizer, std::span<const TokenId> prompt,
                                   int64_t gen_tokens, KvDtype dtype) {
    SamplingParams greedy;
    greedy.max_tokens = int32_t(gen_tokens);
    greedy.ignore_eos = true;
    KvCache cache(config, int64_t(prompt.size()) + gen_tokens, dtype);
    return generate(runner, config, tokenizer, prompt, greedy, {}, &cache).tokens;
}

}  // namespace

KvQuality measure_kv_quality(ModelRunner& runner, const ModelConfig& config,
                             const Tokenizer& tokenizer, std::span<const TokenId> prompt,
                             int64_t gen_tokens, KvDtype baseline, KvDtype candidate) {
    if (gen_tokens < 1 || int64_t(prompt.size()) + gen_tokens > config.context_length) {
        throw Error("kv quality: the prompt plus generated tokens must fit the context");
    }
    const std::vector<TokenId> reference =
        greedy_tokens(runner, config, tokenizer, prompt, gen_tokens, baseline);
    std::vector<TokenId> sequence(prompt.begin(), prompt.end());
    // The last generated token is never fed back, so it has no logits to compare.
    sequence.insert(sequence.end(), reference.begin(), reference.end() - 1);

    const int64_t prompt_tokens = int64_t(prompt.size());
    const auto base = stepwise_logits(runner, config, sequence, prompt_tokens, baseline);
    const auto cand = stepwise_logits(runner, config, sequence, prompt_tokens, candidate);
    KvQuality quality;
    for (size_t step = 0; step < base.size(); ++step) {
        quality.compared_steps += 1;
        quality.argmax_agreements += argmax(base[step]) == argmax(cand[step]) ? 1 : 0;
        for (size_t i = 0; i < base[step].size(); ++i) {
            quality.max_abs_logit_error =
                std::max(quality.max_abs_logit_error, std::fabs(cand[step][i] - base[step][i]));
            quality.max_abs_logit = std::max(quality.max_abs_logit, std::fabs(base[step][i]));
        }
    }

    const std::vector<TokenId> free_running =
        greedy_tokens(runner, config, tokenizer, prompt, gen_tokens, candidate);
    quality.generated_tokens = int64_t(reference.size());
    while (quality.identical_prefix < int64_t(reference.size()) &&
           free_running[size_t(quality.identical_prefix)] ==
               reference[size_t(quality.identical_prefix)]) {
        ++quality.identical_prefix;
    }
    return quality;
}

KvQuality combine(const std::vector<KvQuality>& per_prompt) {
    KvQuality total;
    for (const KvQuality& q : per_prompt) {
        total.compared_steps += q.compared_steps;
        total.argmax_agreements += q.argmax_agreements;
        total.max_abs_logit_error = std::max(total.max_abs_logit_error, q.max_abs_logit_error);
        total.max_abs_logit = std::max(total.max_abs_logit, q.max_abs_logit);
        total.generated_tokens += q.generated_tokens;
        total.identical_prefix += q.identical_prefix;
    }
    return total;
}

}  // namespace servelab
