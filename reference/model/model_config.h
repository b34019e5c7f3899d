// model_config.h — the hyperparameters of a llama-family model, read from GGUF.
//
// Part of the model loader (all labs). Keys are `{arch}.*` where arch is
// `general.architecture`: "llama" for SmolLM2 and every MHA/GQA/MQA model,
// "deepseek2" for multi-head latent attention (MLA, DeepSeek-V2; Lab 3).
// Every value is checked for sanity (positive, divisible, within limits) so
// that later code can index with them without re-checking.
#pragma once

#include <cstdint>
#include <string>

namespace servelab {

class GgufFile;

// How a layer's attention gets its keys and values (chapter 11.3).
enum class AttentionKind {
    kMultiHead,  // llama: K and V projected per KV head — MHA, GQA or MQA by num_kv_heads
    kLatent,     // deepseek2 MLA: K and V rebuilt from a cached low-rank latent
};

struct ModelConfig {
    std::string architecture;         // general.architecture
    std::string name;                 // general.name (may be empty)
    int64_t num_layers = 0;           // {arch}.block_count
    int64_t dim = 0;                  // {arch}.embedding_length: the residual stream width
    int64_t ffn_dim = 0;              // {arch}.feed_forward_length
    int64_t num_heads = 0;            // {arch}.attention.head_count (query heads)
    int64_t num_kv_heads = 0;         // {arch}.attention.head_count_kv (GQA when < num_heads)
    int64_t head_dim = 0;             // dim / num_heads
    int64_t rope_dim = 0;             // {arch}.rope.dimension_count (defaults to head_dim)
    float rope_freq_base = 10000.0f;  // {arch}.rope.freq_base
    float rms_norm_eps = 1e-5f;       // {arch}.attention.layer_norm_rms_epsilon
    int64_t context_length = 0;       // {arch}.context_length: longest sequence trained on
    int64_t vocab_size = 0;           // rows of token_embd.weight
    bool tied_embeddings = false;     // no output.weight: the head reuses token_embd
    AttentionKind attention = AttentionKind::kMultiHead;
    int64_t v_head_dim = 0;  // value width per head: head_dim, or {arch}.attention.value_length

    // MLA only (zero otherwise). head_dim = qk_nope_dim + rope_dim is the
    // query/key width per head ({arch}.attention.key_length).
    int64_t kv_lora_rank = 0;  // d_c, {arch}.attention.kv_lora_rank: the cached latent's width
    int64_t q_lora_rank = 0;   // {arch}.attention.q_lora_rank; 0 = queries straight from attn_q
    int64_t qk_nope_dim = 0;   // per-head query/key dims without position (from the latent)

    // Query heads that share one KV head (1 = MHA, num_heads = MQA).
    int64_t heads_per_kv_head() const { return num_heads / num_kv_heads; }
    int64_t q_dim() const { return num_heads * head_dim; }
    int64_t kv_dim() const { return num_kv_heads * head_dim; }
    // Width of the attention output that attn_output.weight projects back to dim.
    int64_t attn_out_dim() const { return num_heads * v_head_dim; }
    bool is_mla() const { return attention == AttentionKind::kLatent; }

    // Reads and validates. Throws servelab::Error naming the bad key or value.
    static ModelConfig from_gguf(const GgufFile& file);
};

// The longest request (prompt and output together) an engine admits: the
// model's context, or less when `max_model_len` (vLLM's --max-model-len)
// caps it, so that a KV pool smaller than one full context can still hold
// every request it admits. 0 = no cap; a cap above the context leaves the
// context (a server of several models caps each). Throws servelab::Error
// naming --max-model-len when it is below 2 (one prompt token and one
// generated).
int64_t capped_context_length(const ModelConfig& config, int64_t max_model_len);

}  // namespace servelab
