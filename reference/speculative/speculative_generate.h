// speculative_generate.h — one request decoded speculatively: draft, verify in one pass, roll back.
//
// Lab 6 (chapter 11.6; groundwork for the engine's speculative steps). The
// loop of speculative decoding for a single sequence on the CPU runner's
// paged cache, with the n-gram drafter and greedy verification:
//   propose K tokens after the sequence (ngram_proposer.h);
//   run the target ONCE over [last token, d_1..d_K] — K+1 positions, logits
//     at every one (the pass that makes speculation pay: a decode step costs
//     about as much for 1 token as for K+1, the weights being read once);
//   keep the drafts the target agrees with, plus its own next token
//     (rejection_sampler.h: verify_greedy);
//   roll the KV cache back past the rejected drafts (KvBlockManager::rollback).
// Greedy speculative output equals greedy output token for token; only the
// number of forward passes changes.
#pragma once

#include <cstdint>
#include <span>

#include "reference/engine/generator.h"
#include "reference/engine/model_runner.h"
#include "reference/model/model.h"

namespace servelab {

struct SpeculativeStats {
    int64_t target_passes = 0;    // forward passes of the target (the prefill included)
    int64_t drafted_tokens = 0;   // proposed by the drafter, over all passes
    int64_t accepted_tokens = 0;  // of those, kept
};

// Greedy decoding of `prompt_tokens` with up to `k` n-gram drafts per pass.
// params.temperature must be 0 (stochastic verification needs the target's
// filtered distribution: the engine's job). Throws servelab::Error for bad
// parameters, an empty or overlong prompt.
GenerationResult speculative_generate(ModelRunner& runner, const Model& model,
                                      std::span<const TokenId> prompt_tokens,
                                      const SamplingParams& params, int64_t k,
                                      SpeculativeStats* stats = nullptr);

}  // namespace servelab
