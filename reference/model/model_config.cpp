// model_config.cpp — see model_config.h.
#include "reference/model/model_config.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/common/error.h"
#include "reference/model/gguf_reader.h"

namespace servelab {
namespace {

// Large enough for any real llama model, small enough that products of these
// values cannot overflow int64 and a hostile file cannot ask for terabytes.
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxWidth = 1 << 17;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxContext = 1 << 24;

int64_t read_positive(const GgufFile& file, const std::string& key, int64_t max_value) {
    const uint64_t value = file.get_uint(key);
    if (value == 0 || value > uint64_t(max_value)) {
        throw Error(
            fmt::format("model config: '{}' = {} is out of range [1, {}]", key, value, max_value));
    }
    return int64_t(value);
}

// llama: keys and values per KV head; head_dim = dim / num_heads.
void read_multi_head_attention(const GgufFile& file, const std::string& arch, ModelConfig& config) {
    if (config.dim % config.num_heads != 0) {
        throw Error(
            fmt::format("model config: embedding_length {} is not divisible by "
                        "head_count {}",
                        config.dim, config.num_heads));
    }
    config.head_dim = config.dim / config.num_heads;
    config.v_head_dim = config.head_dim;
    config.rope_dim =
        int64_t(file.get_uint(arch + "rope.dimension_count", uint64_t(config.head_dim)));
}

// deepseek2 (MLA): the per-head widths are explicit keys, and the latent
// ranks say what is cached. Mixture-of-experts layers and YaRN RoPE scaling
// (both used by the released DeepSeek-V2 checkpoints) are not implemented:
// refuse them by name rather than run a different model.
void read_latent_attention(const GgufFile& file, const std::string& arch, ModelConfig& config) {
    config.attention = AttentionKind::kLatent;
    config.kv_lora_rank = read_positive(file, arch + "attention.kv_lora_rank", kMaxWidth);
    config.q_lora_rank = int64_t(file.get_uint(arch + "attention.q_lora_rank", 0));
    if (config.q_lora_rank > kMaxWidth) {
        throw Error(fmt::format("model config: q_lora_rank {} is out of range [0, {}]",
                                config.q_lora_rank, kMaxWidth));
    }
    config.head_dim = read_positive(file, arch + "attention.key_length", kMaxWidth);
    config.v_head_dim = read_positive(file, arch + "attention.value_length", kMaxWidth);
    config.rope_dim = read_positive(file, arch + "rope.dimension_count", kMaxWidth);
    config.qk_nope_dim = config.head_dim - config.rope_dim;
    if (config.qk_nope_dim < 0) {
        throw Error(fmt::format("model config: rope.dimension_count {} exceeds key_length {}",
                                config.rope_dim, config.head_dim));
    }
    const uint64_t num_experts = file.get_uint(arch + "expert_count", 0);
    const uint64_t dense_blocks =
        file.get_uint(arch + "leading_dense_block_count", uint64_t(config.num_layers));
    if (num_experts > 0 && dense_blocks < uint64_t(config.num_layers)) {
        throw Error(
            fmt::format("model config: {} mixture-of-experts layers ({} experts) are not "
                        "supported; servelab runs MLA models with dense MLPs",
                        uint64_t(config.num_layers) - dense_blocks, num_experts));
    }
    const std::string scaling = file.get_string(arch + "rope.scaling.type", "none");
    if (scaling != "none") {
        throw Error(fmt::format("model config: RoPE scaling '{}' is not supported", scaling));
    }
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& file) {
    ModelConfig config;
    config.architecture = file.get_string("general.architecture");
    if (config.architecture != "llama" && config.architecture != "deepseek2") {
        throw Error(fmt::format(
            "model config: architecture '{}' is not supported (servelab runs 'llama' and "
            "'deepseek2')",
            config.architecture));
    }
    config.name = file.get_string("general.name", "");
    const std::string arch = config.architecture + ".";

    config.num_layers = read_positive(file, arch + "block_count", kMaxLayers);
    config.dim = read_positive(file, arch + "embedding_length", kMaxWidth);
    config.ffn_dim = read_positive(file, arch + "feed_forward_length", 4 * kMaxWidth);
    config.num_heads = read_positive(file, arch + "attention.head_count", kMaxHeads);
    // Files written before GQA existed omit head_count_kv: then every query
    // head has its own KV head (MHA).
    config.num_kv_heads = file.find(arch + "attention.head_count_kv")
                              ? read_positive(file, arch + "attention.head_count_kv", kMaxHeads)
                              : config.num_heads;
    config.context_length = read_positive(file, arch + "context_length", kMaxContext);
    if (config.num_heads % config.num_kv_heads != 0) {
        throw Error(
            fmt::format("model config: head_count {} is not divisible by "
                        "head_count_kv {}",
                        config.num_heads, config.num_kv_heads));
    }
    if (config.architecture == "deepseek2") {
        read_latent_attention(file, arch, config);
    } else {
        read_multi_head_attention(file, arch, config);
    }
    if (config.rope_dim <= 0 || config.rope_dim > config.head_dim || config.rope_dim % 2 != 0) {
        throw Error(
            fmt::format("model config: rope.dimension_count {} must be even and in "
                        "[2, head_dim = {}]",
                        config.rope_dim, config.head_dim));
    }
    config.rope_freq_base = float(file.get_float(arch + "rope.freq_base", 10000.0));
    config.rms_norm_eps = float(file.get_float(arch + "attention.layer_norm_rms_epsilon", 1e-5));
    if (!(config.rope_freq_base > 1.0f) || !(config.rms_norm_eps > 0.0f) ||
        !(config.rms_norm_eps < 1.0f)) {
        throw Error(fmt::format("model config: rope.freq_base {} or rms epsilon {} out of range",
                                config.rope_freq_base, config.rms_norm_eps));
    }

    // The vocabulary size is the number of rows of the embedding table; the
    // metadata key, when present, must agree with it.
    const GgufTensorInfo* embedding = file.find_tensor("token_embd.weight");
    if (embedding == nullptr) throw Error("model: missing required tensor 'token_embd.weight'");
    if (embedding->dims.size() != 2 || embedding->dims[0] != config.dim) {
        throw Error(
            fmt::format("model: tensor 'token_embd.weight' must be [{}, vocab]", config.dim));
    }
    config.vocab_size = embedding->dims[1];
    const uint64_t declared_vocab = file.get_uint(arch + "vocab_size", uint64_t(config.vocab_size));
    if (int64_t(declared_vocab) != config.vocab_size) {
        throw Error(fmt::format("model config: vocab_size {} disagrees with token_embd rows {}",
                                declared_vocab, config.vocab_size));
    }
    config.tied_embeddings = file.find_tensor("output.weight") == nullptr;
    return config;
}

int64_t capped_context_length(const ModelConfig& config, int64_t max_model_len) {
    // Two tokens at least: one of prompt, one generated.
    if (max_model_len < 0 || max_model_len == 1) {
        throw Error(
            fmt::format("--max-model-len {}: a request needs at least 2 tokens (one of "
                        "prompt, one generated)",
                        max_model_len));
    }
    return max_model_len == 0 ? config.context_length
                              : std::min(max_model_len, config.context_length);
}

}  // namespace servelab
