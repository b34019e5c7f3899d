// engine_generate.cpp — the engine's blocking helpers: queue some requests, step until they
// finish, return their results in order.
//
// Part of the engine (Lab 5, chapter 11.5, continuous batching). For callers
// with a fixed set of prompts (the CLI's CliGenerator, the tests); the server
// and `bench throughput` drive Engine::step themselves.
#include <map>

#include "kernels/common/error.h"
#include "reference/engine/engine.h"

namespace servelab {

std::vector<GenerationResult> Engine::run_until_done(const std::vector<int64_t>& ids) {
    std::map<int64_t, GenerationResult> done;
    try {
        while (done.size() < ids.size()) {
            StepOutput out = step();
            for (FinishedRequest& f : out.finished) done[f.request_id] = std::move(f.result);
        }
    } catch (...) {
        for (int64_t id : ids) cancel(id);  // give every block back before reporting
        cancelled_.clear();
        throw;
    }
    std::vector<GenerationResult> results;
    for (int64_t id : ids) results.push_back(std::move(done.at(id)));
    return results;
}

std::vector<GenerationResult> Engine::generate(const std::vector<std::vector<TokenId>>& prompts,
                                               const SamplingParams& params) {
    if (has_unfinished()) throw Error("generate: the engine already has requests in flight");
    std::vector<int64_t> ids;
    try {
        for (const std::vector<TokenId>& prompt : prompts)
            ids.push_back(add_request(prompt, params));
    } catch (...) {
        for (int64_t id : ids) cancel(id);
        cancelled_.clear();
        throw;
    }
    return run_until_done(ids);
}

std::vector<GenerationResult> Engine::generate_parallel(std::span<const TokenId> prompt,
                                                        const SamplingParams& params,
                                                        int num_completions,
                                                        const TokenCallback& on_token) {
    if (has_unfinished()) throw Error("generate: the engine already has requests in flight");
    return run_until_done(
        add_parallel_request({prompt.begin(), prompt.end()}, params, num_completions, on_token));
}

}  // namespace servelab
