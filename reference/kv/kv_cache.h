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
//
// Lab 3 shrinks it three ways, all visible here: fewer KV heads (GQA/MQA:
// num_kv_heads < num_heads), a smaller thing to cache (MLA: see KvLayout) and
// fewer bits per element (KvDtype: fp16/bf16, or int8/fp8 with one fp32
// scale per token and head, quantized in write()).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/kv_view.h"
#include "reference/model/model_config.h"

namespace servelab {

// What one layer caches per token: two tensors of (heads × head_dim).
//   multi-head (MHA/GQA/MQA): keys = K, values = V, each num_kv_heads × head_dim.
//   MLA (DeepSeek-V2):        keys = k_pe, the RoPE key shared by all heads (1 × rope_dim);
//                             values = c_kv, the latent (1 × kv_lora_rank) from which every
//                             head's value AND the position-free part of its key are rebuilt.
struct KvTensorShape {
    int64_t num_heads = 0;
    int64_t head_dim = 0;
    int64_t elements() const { return num_heads * head_dim; }
};
struct KvLayout {
    KvTensorShape keys;
    KvTensorShape values;
};
KvLayout kv_layout(const ModelConfig& config);

// Bytes to cache `seq_len` tokens of one sequence, scales included:
//   num_layers × seq_len × (elements per token × bytes per element
//                           + scales per token × 4)
// (for MHA: 2 × num_layers × num_kv_heads × head_dim × seq_len × bytes, + scales).
int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, KvDtype dtype);

class KvCache {
  public:
    // Allocates room for `max_tokens` tokens. Throws servelab::Error if
    // max_tokens is not in [1, context_length].
    KvCache(const ModelConfig& config, int64_t max_tokens, KvDtype dtype = KvDtype::kF32);

    int64_t max_tokens() const { return max_tokens_; }
    KvDtype dtype() const { return dtype_; }
    const KvLayout& layout() const { return layout_; }
    // Tokens whose keys and values are complete in every layer (positions 0..n-1).
    int64_t num_tokens() const { return num_tokens_; }

    // Store the keys and values of `count` tokens at positions
    // [start_position, start_position + count) of `layer`, converting them to
    // the cache's dtype. k: (count, layout().keys), v: (count, layout().values).
    // start_position must equal num_tokens() (a cache is filled in order) and
    // the tokens must fit.
    void write(int64_t layer, int64_t start_position, const float* k, const float* v,
               int64_t count);
    // After every layer has written a step's tokens: they now count as cached.
    void commit(int64_t count);
    // Forget everything (reuse the memory for a new sequence).
    void clear() { num_tokens_ = 0; }

    // The cached keys / values of `layer`, max_tokens rows; rows past the
    // last written position hold stale data. Read rows with kv_row().
    KvView keys(int64_t layer) const;
    KvView values(int64_t layer) const;

    // What this cache really allocated, for comparison with kv_cache_bytes().
    int64_t allocated_bytes() const;

  private:
    // One cached tensor of one layer: encoded elements and, for int8/fp8,
    // one scale per (token, head).
    struct Tensor {
        KvTensorShape shape;
        std::vector<uint8_t> data;  // (max_tokens, heads, head_dim) × element bytes
        std::vector<float> scales;  // (max_tokens, heads) or empty
    };
    Tensor make_tensor(const KvTensorShape& shape) const;
    void write_tensor(Tensor& tensor, int64_t start_position, const float* rows, int64_t count);
    KvView view(const Tensor& tensor) const;

    KvDtype dtype_;
    KvLayout layout_;
    int64_t max_tokens_;
    int64_t num_tokens_ = 0;
    std::vector<Tensor> keys_;    // (num_layers)
    std::vector<Tensor> values_;  // (num_layers)
};

}  // namespace servelab
