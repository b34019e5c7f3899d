// sampling_params.h — how one request turns logits into tokens, and when it stops.
//
// Part of sampling (all labs). Defaults are "off" for every filter, so a
// default SamplingParams with temperature 0 is plain greedy decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/model/tokenizer.h"

namespace servelab {

// More drafts per pass than this never pay: at acceptance rate a the
// expected tokens per pass, (1 - a^(K+1)) / (1 - a), is then within
// a^(K+1) / (1 - a) of its limit 1 / (1 - a), while each draft still costs.
inline constexpr int32_t kMaxSpeculativeTokens = 32;

struct SamplingParams {
    float temperature = 0.0f;         // 0 = greedy (argmax); else logits / temperature
    int32_t top_k = 0;                // keep the k most likely tokens; 0 = off
    float top_p = 1.0f;               // keep the smallest set with probability >= top_p; 1 = off
    float min_p = 0.0f;               // drop tokens with p < min_p * p_max; 0 = off
    float repetition_penalty = 1.0f;  // CTRL-style (Keskar et al., 2019); 1 = off
    int32_t repetition_window = 64;   // last tokens the penalty looks at; 0 = all
    // OpenAI's penalties, over the tokens generated so far (not the prompt):
    // logit[t] -= frequency_penalty * count[t] + presence_penalty * (count[t] > 0).
    // In [-2, 2]; 0 = off.
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    // Added to the logits of the given tokens before sampling, in [-100, 100]
    // (-100 all but bans a token, as in OpenAI's API).
    std::vector<std::pair<TokenId, float>> logit_bias;
    uint64_t seed = 0;                      // per-request RNG seed: same seed, same tokens
    int32_t max_tokens = 128;               // generated tokens at most
    std::vector<TokenId> stop_token_ids;    // besides the model's end-of-generation tokens
    std::vector<std::string> stop_strings;  // generation ends before the first match
    bool ignore_eos = false;                // keep going past end-of-generation tokens
    // End-of-generation and stop token ids do not end the request before this
    // many tokens (vLLM's min_tokens; serving benchmarks set it to max_tokens
    // to fix the output length). Stop strings and max_tokens still apply.
    int32_t min_tokens = 0;
    // Speculative decoding (Lab 6): up to this many drafted tokens verified
    // per step (K); 0 = off. `drafter` names one of the engine's drafters
    // ("ngram" always exists; empty = the engine's default). Speculation
    // never changes what is sampled, only how many forward passes it takes.
    int32_t num_speculative_tokens = 0;
    std::string drafter;
    // Log-probabilities of the sampled tokens (token_logprobs.h): -1 = off;
    // k >= 0 = each token's own, plus the k most likely tokens at its
    // position (at most kMaxTopLogprobs). A request asking for them decodes
    // without speculation (the verifier reports accept/reject verdicts, not
    // distributions).
    int32_t logprobs = -1;
    // Constrained decoding (Lab 12): the output must be a sentence of this
    // grammar (a JSON schema's, a regex's, ...), compiled for the model's
    // vocabulary; null = unconstrained. Shared and immutable: the n
    // completions of a request, and every request with the same constraint
    // (GrammarCache), read one. Each request walks it with a matcher of its own.
    std::shared_ptr<const CompiledGrammar> grammar;

    // Throws servelab::Error naming the first out-of-range field.
    void validate() const;
};

// Completion `index` of n completions of one prompt (parallel sampling,
// OpenAI's `n`): the same parameters, seeded seed + index, so that each
// completion is reproducible alone and completion 0 is the single request.
// The one place this rule is written.
inline SamplingParams completion_params(const SamplingParams& params, int index) {
    SamplingParams own = params;
    own.seed = params.seed + uint64_t(index);
    return own;
}

}  // namespace servelab
