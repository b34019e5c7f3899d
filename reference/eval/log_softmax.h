// log_softmax.h — how surprised a model is by a token: the negative log-likelihood of one logits
// row.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ and AWQ; 11.8, what
// quantization costs): the quantity perplexity averages (perplexity.h) and
// the KL divergence compares (next_token_kl.h).
//
// Logits are float32, but the sum over a 49,152-token vocabulary is taken in
// double: in float, the terms far below the maximum are rounded away one by
// one, and a difference of 1e-4 in perplexity between two quantized models
// is exactly what the chapter's comparisons look at.
#pragma once

#include <cstdint>
#include <span>

namespace servelab {

// log Σ_i exp(logits[i]), in double, shifted by the row's maximum so that
// no exp overflows. The row must not be empty.
double log_sum_exp(std::span<const float> logits);

// −log softmax(logits)[target] = log_sum_exp(logits) − logits[target]:
// the cross-entropy, in nats, of the model's next-token distribution
// against the token that actually came. `target` must index the row.
double token_nll(std::span<const float> logits, int64_t target);

}  // namespace servelab
