// kv_quality.h — what a smaller KV element type costs in model output.
//
// Lab 3 (chapter 11.3, KV-cache quantization). Quantizing the cache changes
// the keys and values every later token attends to, so its cost is measured
// on the model's output, two ways:
//   teacher-forced: feed the SAME token sequence (greedy continuation under
//     an fp32 cache) through a baseline cache and a candidate cache, one
//     token per step as in decoding, and compare the logits of every step:
//     the largest |Δlogit| and how often the argmax (the greedy pick) agrees;
//   free-running: greedy-generate with each cache and count how many tokens
//     agree before the first divergence (one early flip changes the rest).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/engine/model_runner.h"
#include "reference/kv/kv_cache.h"
#include "reference/model/tokenizer.h"

namespace servelab {

struct KvQuality {
    int64_t compared_steps = 0;        // decode steps compared teacher-forced
    int64_t argmax_agreements = 0;     // of those, steps where both caches pick the same token
    float max_abs_logit_error = 0.0f;  // largest |logit_candidate - logit_baseline|
    float max_abs_logit = 0.0f;        // largest |logit_baseline|, for scale
    int64_t generated_tokens = 0;      // free-running: tokens generated with each cache
    int64_t identical_prefix = 0;      // free-running: tokens equal before the first difference
};

// For one prompt: greedy-generates `gen_tokens` with a `baseline` cache
// (ignoring end-of-sequence, so every prompt gives the same number of
// steps), then compares `candidate` against it as described above.
KvQuality measure_kv_quality(ModelRunner& runner, const ModelConfig& config,
                             const Tokenizer& tokenizer, std::span<const TokenId> prompt,
                             int64_t gen_tokens, KvDtype baseline, KvDtype candidate);

// Sums counts and takes maxima over prompts.
KvQuality combine(const std::vector<KvQuality>& per_prompt);

}  // namespace servelab
