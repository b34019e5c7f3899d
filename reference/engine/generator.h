// generator.h — naive autoregressive generation: recompute everything, every step.
//
// Part of the engine (Lab 1; chapter: why decoding is serial). Each new token
// depends on all tokens before it, so tokens come out one forward pass at a
// time. Without a KV cache every pass recomputes the whole sequence:
// step n costs O(n) projections and O(n²) attention, so the latency of a
// token grows with its position — the cost Lab 2's KV cache removes.
//
// The loop is written as prompt → [step → sample → stop check]*; a step asks
// `tokens_to_compute` which tokens to run, which is the one place a cache
// changes (it would return only the tokens not yet cached).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "reference/engine/model_runner.h"
#include "reference/engine/stop_checker.h"
#include "reference/sampling/sampling_params.h"

namespace servelab {

struct GenerationTimings {
    double first_step_ms = 0.0;           // the prompt's forward pass (time to first token)
    std::vector<double> step_latency_ms;  // per generated token, by position
    double total_ms = 0.0;
};

struct GenerationResult {
    std::vector<TokenId> prompt_tokens;
    std::vector<TokenId> tokens;  // generated ids (a stop token, when hit, is included)
    std::string text;             // decoded output, stop strings excluded
    FinishReason finish_reason = FinishReason::kLength;
    GenerationTimings timings;
};

// Called once per generated token with the text now safe to show (may be
// empty while a UTF-8 character or a possible stop string is incomplete).
using TokenCallback = std::function<void(TokenId token, const std::string& text_piece)>;

// Generate from `prompt_tokens` (which must already include BOS if the model
// wants one). Throws servelab::Error on an empty prompt, bad parameters or a
// prompt that does not fit the context. Generation also ends, with reason
// "length", when the sequence reaches the model's context length.
GenerationResult generate_naive(ModelRunner& runner, const ModelConfig& config,
                                const Tokenizer& tokenizer, std::span<const TokenId> prompt_tokens,
                                const SamplingParams& params, const TokenCallback& on_token = {});

}  // namespace servelab
