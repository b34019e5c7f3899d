// head_mapping.h — which KV head a query head reads: MHA, GQA and MQA in one rule.
//
// Lab 3 (chapter 11.3, GQA/MQA). Multi-head attention gives every query head
// its own key/value head. Grouped-query attention (Ainslie et al., 2023)
// lets `num_heads / num_kv_heads` consecutive query heads share one KV head,
// and multi-query attention (Shazeer, 2019) is the extreme of one KV head for
// all. The cache shrinks by the same factor; the attention loop does not
// change at all — only this mapping does:
//   MHA  (num_kv_heads == num_heads): query head h reads KV head h
//   GQA  (1 < num_kv_heads < num_heads): heads [g·G, (g+1)·G) read KV head g,
//        G = num_heads / num_kv_heads (the order ggml and Hugging Face use)
//   MQA  (num_kv_heads == 1): every query head reads KV head 0
#pragma once

#include <cstdint>

namespace servelab {

// num_kv_heads divides num_heads (ModelConfig checks it at load).
int64_t kv_head_for_query_head(int64_t query_head, int64_t num_heads, int64_t num_kv_heads);

}  // namespace servelab
