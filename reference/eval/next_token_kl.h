// next_token_kl.h — how far one model's next-token distribution is from another's.
//
// Part of Lab 10, weight quantization (chapter 11.7, GPTQ and AWQ; 11.8, what
// quantization costs). Perplexity only looks at the probability of the token
// that came; two models can score a text alike and still disagree about
// everything else. The KL divergence of the quantized model's distribution P
// from the reference's P0, at the same position of the same text,
//
//   KL(P0 || P) = Σ_i P0(i) · (log P0(i) − log P(i))      (nats, ≥ 0, 0 iff P = P0)
//
// weighs every token by how likely the reference thinks it is, so it sees
// the whole distribution. (Top-1 agreement uses the sampler's argmax,
// reference/sampling/sampling_filters.h.) As llama-perplexity's --kl-divergence does, the
// reference comes first. Everything is computed in double (log_softmax.h).
#pragma once

#include <cstdint>
#include <span>

namespace servelab {

// KL(softmax(reference_logits) || softmax(logits)). Both rows must have the
// same, non-zero length.
double kl_divergence(std::span<const float> reference_logits, std::span<const float> logits);

}  // namespace servelab
