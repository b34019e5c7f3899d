// runner_generate.h — Lab 1's and Lab 2's decoding on any StepRunner, the GPU's included.
//
// Part of the engine (Labs 1-2, chapters 11.2-11.3; the CUDA backend, issue
// 7). The GPU keeps keys and values only in a paged pool, so the two older
// layouts are built from it, which shows what they are:
//   naive (no cache): every step takes a fresh, empty pool and computes the
//     whole sequence from position 0 — all keys and values recomputed, the
//     cost growing with the sequence at every step;
//   contiguous (one buffer per request): one pool of exactly the blocks the
//     request can ever need (prompt + max_tokens, capped at the context),
//     reserved up front and handed out in order — block 0, 1, 2, … — so the
//     request's rows are one contiguous run; each step computes only the
//     tokens not cached yet.
// Tokens, stopping and timings are the generation loop's (generator.h). On
// the CPU runner both give generate()'s tokens up to rounding: the pool's
// attention (FlashAttention over blocks) adds in another order than Lab 1's
// and Lab 2's kernels, so their logits differ by about 1e-6, which flips a
// near-tie now and then.
#pragma once

#include <cstdint>
#include <span>

#include "reference/engine/generator.h"
#include "reference/engine/step_runner.h"
#include "reference/model/model.h"

namespace servelab {

enum class RunnerLayout { kNaive, kContiguous };

// Throws servelab::Error on an empty prompt, bad parameters or a prompt that
// does not fit the context.
GenerationResult generate_on_runner(StepRunner& runner, const Model& model,
                                    std::span<const TokenId> prompt_tokens,
                                    const SamplingParams& params, RunnerLayout layout,
                                    int64_t block_size, const TokenCallback& on_token = {});

}  // namespace servelab
