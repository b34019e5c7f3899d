// step_plan.h — which tokens the next forward pass computes.
//
// Part of the engine (Lab 1 and Lab 2; chapters 11.2 and 11.3). This is the
// one place a KV cache changes decoding:
//   no cache (Lab 1):  every step recomputes the whole sequence from position 0;
//   with a cache (Lab 2): a step computes only the tokens not cached yet —
//     the whole prompt at the first step ("prefill"), then one token per step
//     ("decode").
#pragma once

#include <span>

#include "reference/engine/model_runner.h"
#include "reference/kv/kv_cache.h"

namespace servelab {

// `sequence` is every token so far (prompt + generated). The returned step
// points into `sequence` and asks for the logits of its last token only.
StepInput plan_step(std::span<const TokenId> sequence, const KvCache* cache);

}  // namespace servelab
