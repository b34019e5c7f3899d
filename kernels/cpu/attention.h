// attention.h — causal scaled-dot-product attention with the GQA head mapping.
//
// Plain CPU kernel (Lab 1; chapter: attention, GQA). For each query head h
// and query token t:
//   scores[j] = q[t,h] · k[j,g] / sqrt(head_dim)   for keys j <= position(t)
//   out[t,h]  = Σ_j softmax(scores)[j] · v[j,g]
// where g = kv_head_for_query_head(h, ...) is the KV head that query head h
// shares with its group (g = h for MHA, g = 0 for MQA; head_mapping.h, Lab 3).
//
// The queries are the LAST num_queries of the num_keys tokens: query t sits at
// position num_keys - num_queries + t and may see keys up to that position.
// Without a cache (Lab 1) num_queries == num_keys; with a KV cache the keys
// include earlier steps' tokens.
#pragma once

#include <cstdint>

namespace servelab {

struct AttentionShape {
    int64_t num_queries = 0;   // tokens computed this step
    int64_t num_keys = 0;      // tokens visible to the last query (>= num_queries)
    int64_t num_heads = 0;     // query heads
    int64_t num_kv_heads = 0;  // divides num_heads
    int64_t head_dim = 0;
};

// q:   (num_queries, num_heads, head_dim)
// k,v: (num_keys, num_kv_heads, head_dim)
// out: (num_queries, num_heads, head_dim)
void attention_causal(const float* q, const float* k, const float* v, float* out,
                      const AttentionShape& shape);

}  // namespace servelab
