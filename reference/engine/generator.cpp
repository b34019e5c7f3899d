// generator.cpp — see generator.h.
#include "reference/engine/generator.h"

#include <fmt/format.h>

#include <chrono>

#include "reference/common/error.h"
#include "reference/sampling/sampler.h"

namespace servelab {
namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
        .count();
}

// Naive decoding recomputes the whole sequence at every step.
std::span<const TokenId> tokens_to_compute(const std::vector<TokenId>& sequence) {
    return sequence;
}

}  // namespace

GenerationResult generate_naive(ModelRunner& runner, const ModelConfig& config,
                                const Tokenizer& tokenizer, std::span<const TokenId> prompt_tokens,
                                const SamplingParams& params, const TokenCallback& on_token) {
    params.validate();
    if (prompt_tokens.empty()) throw Error("generate: the prompt is empty");
    if (int64_t(prompt_tokens.size()) >= config.context_length) {
        throw Error(fmt::format("generate: prompt of {} tokens does not fit the context length {}",
                                prompt_tokens.size(), config.context_length));
    }

    GenerationResult result;
    result.prompt_tokens.assign(prompt_tokens.begin(), prompt_tokens.end());
    std::vector<TokenId> sequence = result.prompt_tokens;
    Sampler sampler(params);
    StopChecker stop(tokenizer, params);
    std::string text_piece;
    const auto start = std::chrono::steady_clock::now();

    while (true) {
        const auto step_start = std::chrono::steady_clock::now();
        std::vector<float> logits = runner.forward({tokens_to_compute(sequence), 0});
        const TokenId token = sampler.sample(logits, sequence);
        const double step_ms = elapsed_ms(step_start);
        if (result.tokens.empty()) result.timings.first_step_ms = step_ms;
        result.timings.step_latency_ms.push_back(step_ms);

        sequence.push_back(token);
        result.tokens.push_back(token);
        std::optional<FinishReason> finished = stop.push(token, text_piece);
        // The context is full: no position is left for another token.
        if (!finished && int64_t(sequence.size()) >= config.context_length) {
            text_piece += stop.finish();
            finished = FinishReason::kLength;
        }
        if (on_token) on_token(token, text_piece);
        if (finished) {
            result.finish_reason = *finished;
            break;
        }
    }
    result.text = stop.text();
    result.timings.total_ms = elapsed_ms(start);
    return result;
}

}  // namespace servelab
