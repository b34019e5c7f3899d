// attention_kv.h — causal attention over a KV cache stored in any KV element type.
//
// Plain CPU kernel (Labs 2–3; chapter 11.3). The same computation as
// attention_causal (attention.h), but keys and values are read through
// KvViews, so the cache may hold fp32, fp16, bf16, int8 or fp8 rows: each
// row is dequantized right where it is used, and all arithmetic is fp32.
//
// The loop runs over KV heads rather than query heads: a KV row is loaded
// (and dequantized) once and then used by every query head that reads it
// (kernels/cpu/head_mapping.h). That reuse is exactly why GQA/MQA decode
// faster — fewer distinct rows to stream from memory per step.
#pragma once

#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_view.h"

namespace servelab {

// q, out: (num_queries, num_heads, head_dim)
// keys, values: views of at least num_keys tokens with num_kv_heads heads of head_dim.
void attention_over_kv(const float* q, const KvView& keys, const KvView& values, float* out,
                       const AttentionShape& shape);

}  // namespace servelab
