// generation_common.h — what the single-request generation loops check, time and do per token
// alike.
//
// Part of the engine (Labs 1 and 2). Used by runner_generate.cpp (the naive
// and contiguous layouts on any StepRunner). (generator.cpp, Lab 1's
// exercise, keeps its own copy so the student's file stands alone.)
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "reference/engine/generator.h"
#include "reference/engine/stop_checker.h"
#include "reference/model/model_config.h"
#include "reference/model/tokenizer.h"

namespace servelab {

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
        .count();
}

// Throws servelab::Error for an empty prompt, a token id outside the
// vocabulary, or a prompt that leaves no position for a generated token.
inline void check_prompt(std::span<const TokenId> prompt, const ModelConfig& config) {
    if (prompt.empty()) throw Error("generate: the prompt is empty");
    if (int64_t(prompt.size()) >= config.context_length) {
        throw Error(fmt::format("generate: prompt of {} tokens does not fit the context length {}",
                                prompt.size(), config.context_length));
    }
    for (TokenId id : prompt) {
        if (id < 0 || id >= config.vocab_size) {
            throw Error("generate: a prompt token id is outside the vocabulary");
        }
    }
}

// Appends `token`, which a step of `step_ms` produced, to `sequence` and
// `result`, asks the stop checker, and streams the text now safe to show.
// A sequence that reaches `capacity` ends with "length". Returns the finish
// reason when this token ends generation (also stored in `result`).
inline std::optional<FinishReason> emit_token(TokenId token, double step_ms, int64_t capacity,
                                              std::vector<TokenId>& sequence,
                                              GenerationResult& result, StopChecker& stop,
                                              const TokenCallback& on_token) {
    if (result.tokens.empty()) result.timings.first_step_ms = step_ms;
    result.timings.step_latency_ms.push_back(step_ms);
    sequence.push_back(token);
    result.tokens.push_back(token);
    std::string text_piece;
    std::optional<FinishReason> finished = stop.push(token, text_piece);
    // The sequence is full: no position is left for another token.
    if (!finished && int64_t(sequence.size()) >= capacity) {
        text_piece += stop.finish();
        finished = FinishReason::kLength;
    }
    if (on_token) on_token(token, text_piece);
    if (finished) result.finish_reason = *finished;
    return finished;
}

}  // namespace servelab
