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

// One decode round: every unfinished completion computes its newest token,
// all of them in ONE batched forward pass (the weights are read once for the
// round, not once per completion), then each samples its next token. A
// completion the pool has no block for ends here with reason "length".
// Returns whether any completion is still running.
bool decode_round(ModelRunner& runner, KvBlockManager& kv, std::vector<Completion>& completions,
                  int64_t context_length, Clock::time_point start, const TokenCallback& on_token) {
    const auto round_start = Clock::now();
    std::vector<SequenceChunk> chunks;
    std::vector<size_t> in_round;  // which completion each chunk is
    for (size_t i = 0; i < completions.size(); ++i) {
        Completion& c = completions[i];
        if (c.finished) continue;
        if (!kv.reserve(c.kv, 1)) {
            c.result.out_of_kv_blocks = true;
            const std::string held_back = c.stop.finish();
            finish(c, FinishReason::kLength, start);
            kv.finish(c.kv);
            if (i == 0 && on_token) on_token(c.result.tokens.back(), held_back);
            continue;
        }
        const int64_t position = int64_t(c.sequence.size()) - 1;
        chunks.push_back(
            {StepInput{std::span(c.sequence).subspan(size_t(position)), position}, &c.kv.table});
        in_round.push_back(i);
    }
    if (chunks.empty()) return false;

    std::vector<float> logits = runner.forward_batch(chunks, kv.cache());
    const double round_ms = elapsed_ms(round_start);
    const size_t vocab_size = logits.size() / chunks.size();
    bool any_running = false;
    for (size_t r = 0; r < in_round.size(); ++r) {
        Completion& c = completions[in_round[r]];
        kv.commit(c.kv, c.sequence);
        const TokenId token =
            c.sampler.sample(std::span(logits).subspan(r * vocab_size, vocab_size), c.sequence);
        c.result.timings.step_latency_ms.push_back(round_ms);
        const std::string piece = accept_token(c, token, context_length, start);
        if (in_round[r] == 0 && on_token) on_token(token, piece);
        if (c.finished) kv.finish(c.kv);  // its full blocks stay in the prefix cache
        any_running = any_running || !c.finished;
    }
    return any_running;
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
        // Decode, one batched round at a time, until every completion is done.
        while (decode_round(runner, kv, completions, config.context_length, start, on_token)) {
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
