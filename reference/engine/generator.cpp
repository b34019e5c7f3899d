// generator.cpp — see generator.h. Lab 1's exercise: the generation loop.
#include "reference/engine/generator.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "kernels/common/error.h"
#include "reference/engine/step_plan.h"
#include "reference/sampling/sampler.h"

namespace servelab {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
        .count();
}

}  // namespace

GenerationResult generate(ModelRunner& runner, const ModelConfig& config,
                          const Tokenizer& tokenizer, std::span<const TokenId> prompt_tokens,
                          const SamplingParams& params, const TokenCallback& on_token,
                          KvCache* cache) {
    params.validate();
    // The longest sequence this run can hold: the context, or the cache if smaller.
    const int64_t capacity = cache != nullptr ? cache->max_tokens() : config.context_length;
    if (prompt_tokens.empty()) throw Error("generate: the prompt is empty");
    if (int64_t(prompt_tokens.size()) >= capacity) {
        throw Error(fmt::format("generate: prompt of {} tokens does not fit the context length {}",
                                prompt_tokens.size(), capacity));
    }
    if (cache != nullptr && cache->num_tokens() != 0) {
        throw Error("generate: the KV cache must start empty");
    }

    GenerationResult result;
    result.prompt_tokens.assign(prompt_tokens.begin(), prompt_tokens.end());
    std::vector<TokenId> sequence = result.prompt_tokens;
    Sampler sampler(params);
    StopChecker stop(tokenizer, params);
    std::string text_piece;
    const auto start = std::chrono::steady_clock::now();

    // BEGIN SOLUTION lab01
    // HINT: per step: plan_step, runner.forward, sampler.sample, append, stop.push
    // HINT: end when the stop checker says so or the sequence reaches `capacity`
    while (true) {
        const auto step_start = std::chrono::steady_clock::now();
        std::vector<float> logits = runner.forward(plan_step(sequence, cache), cache);
        const TokenId token = sampler.sample(logits, sequence);
        const double step_ms = elapsed_ms(step_start);
        if (result.tokens.empty()) result.timings.first_step_ms = step_ms;
        result.timings.step_latency_ms.push_back(step_ms);

        sequence.push_back(token);
        result.tokens.push_back(token);
        std::optional<FinishReason> finished = stop.push(token, text_piece);
        // The sequence is full: no position is left for another token.
        if (!finished && int64_t(sequence.size()) >= capacity) {
            text_piece += stop.finish();
            finished = FinishReason::kLength;
        }
        if (on_token) on_token(token, text_piece);
        if (finished) {
            result.finish_reason = *finished;
            break;
        }
    }
    // END SOLUTION
    result.text = stop.text();
    result.timings.total_ms = elapsed_ms(start);
    return result;
}

}  // namespace servelab
