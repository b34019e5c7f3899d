// generation_checks.h — what every single-request generation loop checks and times the same way.
//
// Part of the engine (Labs 1, 2 and 6). Shared by runner_generate.cpp (the
// naive and contiguous layouts on any StepRunner) and
// reference/speculative/speculative_generate.cpp. (generator.cpp, Lab 1's
// exercise, keeps its own copy so the student's file stands alone.)
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <span>

#include "reference/common/error.h"
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

}  // namespace servelab
