// speculative_generate.cpp — see speculative_generate.h.
#include "reference/speculative/speculative_generate.h"

#include <chrono>

#include "reference/common/error.h"
#include "reference/engine/generation_common.h"
#include "reference/kv/kv_block_manager.h"
#include "reference/speculative/ngram_proposer.h"
#include "reference/speculative/rejection_sampler.h"

namespace servelab {
GenerationResult speculative_generate(ModelRunner& runner, const Model& model,
                                      std::span<const TokenId> prompt_tokens,
                                      const SamplingParams& params, int64_t k,
                                      SpeculativeStats* stats) {
    params.validate();
    const ModelConfig& config = model.config;
    if (params.temperature != 0.0f) {
        throw Error("speculative_generate: greedy only (temperature 0) for now");
    }
    if (k < 0) throw Error("speculative_generate: k must be >= 0");
    check_prompt(prompt_tokens, config);
    const int64_t block_size = 16;
    PagedKvCache pool(config, (config.context_length + block_size - 1) / block_size, block_size);
    KvBlockManager kv(pool, /*enable_prefix_caching=*/false);
    PagedSequence seq = kv.start({});
    SpeculativeStats own_stats;
    SpeculativeStats& s = stats != nullptr ? *stats : own_stats;

    GenerationResult result;
    result.prompt_tokens.assign(prompt_tokens.begin(), prompt_tokens.end());
    std::vector<TokenId> sequence = result.prompt_tokens;
    StopChecker stop(model.tokenizer, params);
    const auto start = std::chrono::steady_clock::now();
    const size_t vocab = size_t(config.vocab_size);

    while (true) {
        const auto step_start = std::chrono::steady_clock::now();
        // Every token not in the cache yet (the whole prompt at first, then
        // the last emitted token), then the drafts — never past the context.
        const int64_t computed = seq.num_computed_tokens;
        const int64_t room = config.context_length - int64_t(sequence.size());
        const std::vector<TokenId> drafts =
            propose_ngram(sequence, std::min<int64_t>(k, std::max<int64_t>(room - 1, 0)));
        std::vector<TokenId> chunk(sequence.begin() + computed, sequence.end());
        chunk.insert(chunk.end(), drafts.begin(), drafts.end());
        if (!kv.reserve(seq, int64_t(chunk.size()))) throw Error("speculative: the pool is full");
        const std::vector<float> logits =
            runner.forward({chunk, computed, LogitsFor::kAllTokens}, pool, seq.table);
        ++s.target_passes;
        // The rows that verify: the one after the last emitted token, then
        // one after each draft.
        const size_t first_row = chunk.size() - drafts.size() - 1;
        const Verification v =
            verify_greedy(drafts, std::span(logits).subspan(first_row * vocab), config.vocab_size);
        s.drafted_tokens += int64_t(drafts.size());
        s.accepted_tokens += v.num_accepted;
        // Keep the keys of the emitted tokens and the accepted drafts only.
        kv.rollback(seq, int64_t(sequence.size()) + v.num_accepted);
        seq.num_computed_tokens = seq.table.num_tokens();

        std::vector<TokenId> emitted(drafts.begin(), drafts.begin() + v.num_accepted);
        emitted.push_back(v.next_token);
        const double step_ms = elapsed_ms(step_start);
        bool finished = false;
        for (size_t i = 0; i < emitted.size() && !finished; ++i) {
            // A pass's tokens arrive together: the first waited the whole pass.
            finished = emit_token(emitted[i], i == 0 ? step_ms : 0.0, config.context_length,
                                  sequence, result, stop, {})
                           .has_value();
        }
        if (finished) break;
    }
    result.text = stop.text();
    result.timings.total_ms = elapsed_ms(start);
    return result;
}

}  // namespace servelab
