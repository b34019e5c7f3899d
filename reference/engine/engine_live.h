// engine_live.h — the engine's private record of one request in flight (engine*.cpp only).
//
// Part of the engine (Lab 5, chapter 11.5, continuous batching). Not part of
// the engine's interface: only the files that implement Engine include it
// (engine.cpp, the step; engine_output.cpp, what a request does with its
// tokens). Each request has its own Sampler and StopChecker, so its tokens
// depend only on its own parameters and seed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "reference/engine/engine.h"

namespace servelab {

struct Engine::Live {
    Live(int64_t id, std::vector<TokenId> prompt, const SamplingParams& params, int32_t priority,
         int64_t block_size, const Tokenizer& tokenizer, TokenCallback callback,
         Clock::time_point arrival)
        : request(std::make_unique<Request>(id, std::move(prompt), params, priority, block_size)),
          sampler(request->params),
          stop(tokenizer, request->params),
          on_token(std::move(callback)),
          arrival(arrival),
          last_token(arrival) {
        if (request->params.grammar) grammar.emplace(request->params.grammar);
    }

    // On the heap, and never null while the Live exists, except after
    // finish() handed it to static batching as a padding row (StaticPadding),
    // which outlives the rest of the Live.
    std::unique_ptr<Request> request;
    Sampler sampler;
    StopChecker stop;  // refers to request->params, which never moves (heap)
    TokenCallback on_token;
    GenerationResult result;
    Clock::time_point arrival;
    Clock::time_point last_token;
    bool scheduled_once = false;
    // Parallel sampling: the ids of the completions waiting to fork this
    // request's prompt, and whether this one is such a waiting sibling.
    std::vector<int64_t> siblings;
    bool waiting_to_fork = false;
    Drafter* drafter = nullptr;  // speculative decoding only
    // Constrained decoding (Lab 12): where the output stands in the
    // request's grammar, advanced by every token the request accepts, and
    // the masks this step's sample (masks[0]) or verification (one per
    // position) draws under. The runner reads the masks during the step.
    std::optional<GrammarMatcher> grammar;
    std::vector<TokenBitmask> masks;
};

inline double ms_between(Engine::Clock::time_point from, Engine::Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
}

// Sample `i`'s logprobs, when the runner computed any.
inline const std::optional<SampledLogprobs>& logprobs_at(const StepResult& result, size_t i) {
    static const std::optional<SampledLogprobs> none;
    return i < result.logprobs.size() ? result.logprobs[i] : none;
}

}  // namespace servelab
