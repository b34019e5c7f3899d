// sampling_params.cpp — see sampling_params.h.
#include "reference/sampling/sampling_params.h"

#include <fmt/format.h>

#include <cmath>

#include "kernels/common/error.h"
#include "reference/sampling/token_logprobs.h"

namespace servelab {

void SamplingParams::validate() const {
    if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
        throw Error(fmt::format("temperature must be >= 0 (got {})", temperature));
    }
    if (top_k < 0) throw Error(fmt::format("top_k must be >= 0 (got {})", top_k));
    if (!(top_p > 0.0f && top_p <= 1.0f)) {
        throw Error(fmt::format("top_p must be in (0, 1] (got {})", top_p));
    }
    if (!(min_p >= 0.0f && min_p <= 1.0f)) {
        throw Error(fmt::format("min_p must be in [0, 1] (got {})", min_p));
    }
    if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
        throw Error(fmt::format("repetition_penalty must be > 0 (got {})", repetition_penalty));
    }
    if (repetition_window < 0) {
        throw Error(fmt::format("repetition_window must be >= 0 (got {})", repetition_window));
    }
    for (const auto& [name, value] : {std::pair{"presence_penalty", presence_penalty},
                                      std::pair{"frequency_penalty", frequency_penalty}}) {
        if (!(value >= -2.0f && value <= 2.0f)) {
            throw Error(fmt::format("{} must be in [-2, 2] (got {})", name, value));
        }
    }
    for (const auto& [token, bias] : logit_bias) {
        if (token < 0) throw Error(fmt::format("logit_bias: token id {} is negative", token));
        if (!(bias >= -100.0f && bias <= 100.0f)) {
            throw Error(fmt::format("logit_bias for token {} must be in [-100, 100] (got {})",
                                    token, bias));
        }
    }
    if (max_tokens < 1) throw Error(fmt::format("max_tokens must be >= 1 (got {})", max_tokens));
    if (min_tokens < 0 || min_tokens > max_tokens) {
        throw Error(fmt::format("min_tokens must be in [0, max_tokens = {}] (got {})", max_tokens,
                                min_tokens));
    }
    if (num_speculative_tokens < 0 || num_speculative_tokens > kMaxSpeculativeTokens) {
        throw Error(fmt::format("num_speculative_tokens must be in [0, {}] (got {})",
                                kMaxSpeculativeTokens, num_speculative_tokens));
    }
    if (logprobs < -1 || logprobs > kMaxTopLogprobs) {
        throw Error(fmt::format("logprobs must be -1 (off) or in [0, {}] (got {})", kMaxTopLogprobs,
                                logprobs));
    }
    if (logprobs >= 0 && num_speculative_tokens > 0) {
        throw Error("logprobs and speculative decoding cannot be combined in one request");
    }
    for (const std::string& stop : stop_strings) {
        if (stop.empty()) throw Error("stop strings must not be empty");
    }
}

}  // namespace servelab
