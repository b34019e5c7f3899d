// cached_attention.h — attention that reads its keys and values from a KV cache.
//
// Part of the engine (Lab 2; chapter 11.3 KV Cache 与注意力). The queries of
// this step's tokens attend over EVERY cached position, not just this step's:
// at decode time a step is one token, and everything it looks at was
// computed in earlier steps.
#pragma once

#include <cstdint>

#include "reference/kv/kv_cache.h"
#include "reference/model/model_config.h"

namespace servelab {

// Appends this step's k and v to `layer` of `cache` at positions
// [start_position, start_position + num_tokens), then computes causal
// attention of q over all start_position + num_tokens cached positions.
// q, out: (num_tokens, num_heads, head_dim); k, v: (num_tokens, num_kv_heads, head_dim).
void attend_with_cache(KvCache& cache, int64_t layer, int64_t start_position, int64_t num_tokens,
                       const float* q, const float* k, const float* v, float* out,
                       const ModelConfig& config);

}  // namespace servelab
