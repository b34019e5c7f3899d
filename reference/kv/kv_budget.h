// kv_budget.h — how much KV cache a model needs, and how much fits in memory.
//
// Lab 3 (chapter 11.3: the KV cache, not the weights, limits batch size and
// context). For a model config and a KV element type: bytes per token, bytes
// at 4k and 32k context, and what a memory budget buys — the longest single
// context, or the number of concurrent 4k-token requests. Every figure comes
// from kv_cache_bytes(), the formula KvCache's allocation is tested against.
// `servelab info --kv` prints these for the loaded model and the named
// configs below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/kv/kv_cache.h"
#include "reference/model/model_config.h"

namespace servelab {

// The attention-relevant hyperparameters of well-known models (from their
// published configs), for comparing KV footprints without the weights.
struct NamedModelConfig {
    std::string name;
    ModelConfig config;
};
std::vector<NamedModelConfig> named_model_configs();

// "MHA", "GQA 4:1", "MQA" or "MLA d_c=512".
std::string attention_label(const ModelConfig& config);

struct KvFootprint {
    KvDtype dtype = KvDtype::kF32;
    int64_t bytes_per_token = 0;         // all layers, keys and values, scales included
    int64_t bytes_at_4k = 0;             // one sequence of 4096 tokens
    int64_t bytes_at_32k = 0;            // one sequence of 32768 tokens
    int64_t max_context_tokens = 0;      // the longest sequence whose cache fits the budget
    int64_t concurrent_4k_requests = 0;  // 4096-token sequences that fit side by side
};
KvFootprint kv_footprint(const ModelConfig& config, KvDtype dtype, int64_t budget_bytes);

// "16GiB", "512MiB", "80GB", "1000000" (bytes) → bytes; throws servelab::Error
// on anything else or on a size that is not positive.
int64_t parse_byte_size(const std::string& text);
// Throws servelab::Error naming --kv-memory when a KV budget of
// `budget_bytes` cannot sit beside `model_bytes` of weights in
// `memory_bytes` (`memory_name`: "physical memory", "GPU memory"). The
// pool's pages are touched only as blocks fill, so without this check an
// absurd budget is accepted at start and fails mid-serving instead.
void check_kv_budget_fits(int64_t budget_bytes, int64_t memory_bytes, int64_t model_bytes,
                          const std::string& memory_name);
// 1536 → "1.50 KiB"; exact bytes below 1 KiB.
std::string format_bytes(int64_t bytes);

}  // namespace servelab
