// paged_generator.cpp — see paged_generator.h.
#include "reference/engine/paged_generator.h"

#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "reference/common/error.h"
#include "reference/sampling/sampler.h"

namespace servelab {
namespace {

using Clock = std::chrono::steady_clock;

double elapsed_ms(Clock::time_point since) {
    return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// One of the n completions while it is being decoded.
struct Completion {
    PagedSequence kv;
    std::vector<TokenId> sequence;  // prompt + generated
    Sampler sampler;
    StopChecker stop;
    GenerationResult result;
    bool finished = false;
};

void check_request(const ModelConfig& config, std::span<const TokenId> prompt_tokens,
                   const SamplingParams& params, int num_completions) {
    params.validate();
    if (prompt_tokens.empty()) throw Error("generate: the prompt is empty");
    if (num_completions < 1) {
        throw Error(fmt::format("generate: n = {} completions, need at least 1", num_completions));
    }
    if (int64_t(prompt_tokens.size()) >= config.context_length) {
        throw Error(fmt::format("generate: prompt of {} tokens does not fit the context length {}",
                                prompt_tokens.size(), config.context_length));
    }
}

void finish(Completion& c, FinishReason reason, Clock::time_point start) {
    c.result.finish_reason = reason;
    c.result.timings.total_ms = elapsed_ms(start);
    c.finished = true;
}

// Accounts for a sampled token; returns the text now safe to stream.
std::string accept_token(Completion& c, TokenId token, int64_t context_length,
                         Clock::time_point start) {
    c.sequence.push_back(token);
    c.result.tokens.push_back(token);
    std::string text_piece;
    std::optional<FinishReason> finished = c.stop.push(token, text_piece);
    // The sequence is full: no position is left for another token.
    if (!finished && int64_t(c.sequence.size()) >= context_length) {
        text_piece += c.stop.finish();
        finished = FinishReason::kLength;
    }
    if (finished) finish(c, *finished, start);
    return text_piece;
}

// Computes the prompt tokens the prefix cache did not have; returns the
// logits of the last one. Throws (releasing the blocks) when the pool cannot
// hold the prompt.
std::vector<float> prefill(ModelRunner& runner, KvBlockManager& kv, PagedSequence& prompt_kv,
                           std::span<const TokenId> prompt_tokens) {
    const int64_t num_cached = prompt_kv.num_computed_tokens;
    if (!kv.reserve(prompt_kv, int64_t(prompt_tokens.size()) - num_cached)) {
        const int64_t block_size = kv.cache().block_size();
        const int64_t blocks = (int64_t(prompt_tokens.size()) + block_size - 1) / block_size;
        kv.finish(prompt_kv);
        throw Error(
            fmt::format("generate: the prompt needs {} KV blocks but the pool has {} "
                        "(raise --kv-memory)",
                        blocks, kv.cache().num_blocks()));
    }
    try {
        const StepInput step{prompt_tokens.subspan(size_t(num_cached)), num_cached};
        std::vector<float> logits = runner.forward(step, kv.cache(), prompt_kv.table);
        kv.commit(prompt_kv, prompt_tokens);
        return logits;
    } catch (...) {
        kv.finish(prompt_kv);
        throw;
    }
}

// One decode step of one completion: a slot for its newest token, a forward
// pass over that token, the next token sampled. Returns the streamable text.
std::string decode_step(ModelRunner& runner, KvBlockManager& kv, Completion& c,
                        int64_t context_length, Clock::time_point start) {
    const auto step_start = Clock::now();
    if (!kv.reserve(c.kv, 1)) {
        c.result.out_of_kv_blocks = true;
        std::string held_back = c.stop.finish();
        finish(c, FinishReason::kLength, start);
        return held_back;
    }
    const int64_t position = int64_t(c.sequence.size()) - 1;
    const StepInput step{std::span(c.sequence).subspan(size_t(position)), position};
    std::vector<float> logits = runner.forward(step, kv.cache(), c.kv.table);
    kv.commit(c.kv, c.sequence);
    const TokenId token = c.sampler.sample(logits, c.sequence);
    c.result.timings.step_latency_ms.push_back(elapsed_ms(step_start));
    return accept_token(c, token, context_length, start);
}

}  // namespace

std::vector<GenerationResult> generate_paged(ModelRunner& runner, const ModelConfig& config,
                                             const Tokenizer& tokenizer,
                                             std::span<const TokenId> prompt_tokens,
                                             const SamplingParams& params, int num_completions,
                                             KvBlockManager& kv, const TokenCallback& on_token) {
    check_request(config, prompt_tokens, params, num_completions);
    const auto start = Clock::now();

    // Prefill once, then fork: n completions share the prompt's blocks.
    PagedSequence prompt_kv = kv.start(prompt_tokens);
    const int64_t num_cached = prompt_kv.num_computed_tokens;
    const std::vector<float> prompt_logits = prefill(runner, kv, prompt_kv, prompt_tokens);
    const double prefill_ms = elapsed_ms(start);
    // (StopChecker keeps a reference to its parameters: they live here.)
    std::vector<SamplingParams> own_params(size_t(num_completions), params);
    std::vector<Completion> completions;
    completions.reserve(size_t(num_completions));
    for (int i = 0; i < num_completions; ++i) {
        SamplingParams& own = own_params[size_t(i)];
        own.seed = params.seed + uint64_t(i);
        PagedSequence table = i + 1 < num_completions ? kv.fork(prompt_kv) : std::move(prompt_kv);
        completions.push_back(Completion{std::move(table),
                                         {prompt_tokens.begin(), prompt_tokens.end()},
                                         Sampler(own),
                                         StopChecker(tokenizer, own),
                                         {},
                                         false});
    }

    try {
        // Each completion samples its first token from the prompt's logits.
        for (size_t i = 0; i < completions.size(); ++i) {
            Completion& c = completions[i];
            c.result.prompt_tokens.assign(prompt_tokens.begin(), prompt_tokens.end());
            c.result.cached_prompt_tokens = num_cached;
            c.result.timings.first_step_ms = prefill_ms;
            c.result.timings.step_latency_ms.push_back(prefill_ms);
            std::vector<float> logits = prompt_logits;  // the sampler edits its logits
            const TokenId token = c.sampler.sample(logits, c.sequence);
            const std::string piece = accept_token(c, token, config.context_length, start);
            if (i == 0 && on_token) on_token(token, piece);
            if (c.finished) kv.finish(c.kv);
        }
        // Decode: one token per unfinished completion per round. A finished
        // completion's blocks go back at once (its full blocks stay cached).
        bool any_running = true;
        while (any_running) {
            any_running = false;
            for (size_t i = 0; i < completions.size(); ++i) {
                Completion& c = completions[i];
                if (c.finished) continue;
                const std::string piece = decode_step(runner, kv, c, config.context_length, start);
                if (i == 0 && on_token) on_token(c.result.tokens.back(), piece);
                if (c.finished) kv.finish(c.kv);
                any_running = any_running || !c.finished;
            }
        }
    } catch (...) {
        for (Completion& c : completions) kv.finish(c.kv);
        throw;
    }

    std::vector<GenerationResult> results;
    for (Completion& c : completions) {
        c.result.text = c.stop.text();
        results.push_back(std::move(c.result));
    }
    return results;
}

}  // namespace servelab
