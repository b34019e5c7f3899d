// kv_cache.h — a contiguous KV cache for one sequence.
//
// Part of the engine (Lab 2; chapter 11.3 KV Cache 与注意力). Decoding token
// n needs the keys and values of tokens 0..n-1 in every layer. They never
// change once computed (causal attention: later tokens do not affect earlier
// ones), so instead of recomputing them every step (Lab 1) we keep them:
//   keys[layer]:   (max_tokens, num_kv_heads, head_dim)
//   values[layer]: (max_tokens, num_kv_heads, head_dim)
// allocated once for the longest sequence this cache will hold. The price is
// memory: kv_cache_bytes() below, which Lab 3 shrinks and Lab 4 pages.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/model/model_config.h"

namespace servelab {

enum class KvDtype { kF32, kF16, kBF16, kInt8 };
int64_t kv_dtype_bytes(KvDtype dtype);

// Bytes to cache `seq_len` tokens of one sequence:
//   2 (K and V) × num_layers × num_kv_heads × head_dim × seq_len × bytes per element.
int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, KvDtype dtype);

class KvCache {
  public:
    // Allocates room for `max_tokens` tokens in fp32. Throws servelab::Error
    // if max_tokens is not in [1, context_length].
    KvCache(const ModelConfig& config, int64_t max_tokens);

    int64_t max_tokens() const { return max_tokens_; }
    // Tokens whose keys and values are complete in every layer (positions 0..n-1).
    int64_t num_tokens() const { return num_tokens_; }

    // Store the keys and values of `count` tokens at positions
    // [start_position, start_position + count) of `layer`.
    // k, v: (count, num_kv_heads, head_dim). start_position must equal
    // num_tokens() (a cache is filled in order) and the tokens must fit.
    void write(int64_t layer, int64_t start_position, const float* k, const float* v,
               int64_t count);
    // After every layer has written a step's tokens: they now count as cached.
    void commit(int64_t count);
    // Forget everything (reuse the memory for a new sequence).
    void clear() { num_tokens_ = 0; }

    // The cached keys / values of `layer`, (max_tokens, num_kv_heads, head_dim);
    // rows past the last written position hold stale data.
    const float* keys(int64_t layer) const;
    const float* values(int64_t layer) const;

    // What this cache really allocated, for comparison with kv_cache_bytes().
    int64_t allocated_bytes() const;

  private:
    int64_t num_layers_;
    int64_t max_tokens_;
    int64_t kv_dim_;  // num_kv_heads * head_dim: floats per token per layer
    int64_t num_tokens_ = 0;
    std::vector<std::vector<float>> keys_;    // (num_layers) of (max_tokens * kv_dim)
    std::vector<std::vector<float>> values_;  // (num_layers) of (max_tokens * kv_dim)
};

}  // namespace servelab
