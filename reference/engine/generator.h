// generator.h — autoregressive generation: one token per forward pass.
//
// Part of the engine (Lab 1 and Lab 2; chapters 11.2 and 11.3). Each new
// token depends on all tokens before it, so tokens come out one forward pass
// at a time: prompt → [plan step → forward → sample → stop check]*.
//   Without a KV cache (Lab 1, naive) every step recomputes the whole
//   sequence: step n costs O(n) projections and O(n²) attention, so a token's
//   latency grows with its position.
//   With a KV cache (Lab 2) the first step computes the prompt ("prefill")
//   and every later step one token ("decode").
// plan_step (step_plan.h) is the only thing that differs between the two.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "reference/engine/model_runner.h"
#include "reference/engine/stop_checker.h"
#include "reference/kv/kv_cache.h"
#include "reference/sampling/sampling_params.h"
#include "reference/sampling/token_logprobs.h"

namespace servelab {

struct GenerationTimings {
    double first_step_ms = 0.0;  // arrival to the first token (time to first token)
    // Per generated token, by position: the time since the previous token
    // (for the first, since arrival). The later ones are inter-token latencies.
    std::vector<double> step_latency_ms;
    double total_ms = 0.0;  // arrival to the last token (end-to-end latency)
    double queue_ms = 0.0;  // arrival to the first step that computed it (engine only)
};

// Speculative decoding's counts for one request (Lab 6; engine only).
struct SpeculativeStats {
    int64_t verify_passes = 0;    // target passes that verified at least one draft
    int64_t drafted_tokens = 0;   // drafts verified, over all passes
    int64_t accepted_tokens = 0;  // of those, kept
    int64_t rejections = 0;       // passes that rejected a draft (at most one each)

    // The per-draft acceptance rate α: of the drafts the target judged (each
    // pass judges up to and including its first rejection), the share kept.
    double acceptance_rate() const {
        const int64_t judged = accepted_tokens + rejections;
        return judged > 0 ? double(accepted_tokens) / double(judged) : 0.0;
    }
    // Tokens a verification pass emitted on average: the kept drafts plus
    // the target's own token.
    double tokens_per_pass() const {
        return verify_passes > 0 ? double(accepted_tokens + verify_passes) / double(verify_passes)
                                 : 0.0;
    }
};

struct GenerationResult {
    std::vector<TokenId> prompt_tokens;
    std::vector<TokenId> tokens;  // generated ids (a stop token, when hit, is included)
    std::string text;             // decoded output, stop strings excluded
    FinishReason finish_reason = FinishReason::kLength;
    GenerationTimings timings;
    // Paged engine only (Labs 4-5): prompt tokens whose keys and values came
    // from the prefix cache when the request was first scheduled, and how
    // often the scheduler preempted it (each time it recomputed its tokens).
    int64_t cached_prompt_tokens = 0;
    int64_t num_preemptions = 0;
    SpeculativeStats speculative;  // all 0 without speculation
    // One per generated token when SamplingParams::logprobs >= 0 (the
    // engine's requests only), else empty.
    std::vector<SampledLogprobs> logprobs;
};

// Called once per generated token with the text now safe to show (may be
// empty while a UTF-8 character or a possible stop string is incomplete).
using TokenCallback = std::function<void(TokenId token, const std::string& text_piece)>;

// Generate from `prompt_tokens` (which must already include BOS if the model
// wants one). With `cache` (empty, cleared by the caller) keys and values are
// kept between steps; without it every step recomputes everything. Throws
// servelab::Error on an empty prompt, bad parameters or a prompt that does
// not fit. Generation also ends, with reason "length", when the sequence
// fills the context (or the cache).
GenerationResult generate(ModelRunner& runner, const ModelConfig& config,
                          const Tokenizer& tokenizer, std::span<const TokenId> prompt_tokens,
                          const SamplingParams& params, const TokenCallback& on_token = {},
                          KvCache* cache = nullptr);

}  // namespace servelab
