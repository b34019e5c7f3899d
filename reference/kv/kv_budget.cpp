// kv_budget.cpp — see kv_budget.h.
#include "reference/kv/kv_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "kernels/common/error.h"

namespace servelab {
namespace {

ModelConfig multi_head(int64_t layers, int64_t dim, int64_t heads, int64_t kv_heads,
                       int64_t context) {
    ModelConfig c;
    c.architecture = "llama";
    c.num_layers = layers, c.dim = dim, c.num_heads = heads, c.num_kv_heads = kv_heads;
    c.head_dim = dim / heads, c.v_head_dim = c.head_dim, c.rope_dim = c.head_dim;
    c.context_length = context;
    return c;
}

// DeepSeek-V2 (236B; Table/§2.1 of the paper and its config.json).
ModelConfig deepseek_v2() {
    ModelConfig c;
    c.architecture = "deepseek2";
    c.attention = AttentionKind::kLatent;
    c.num_layers = 60, c.dim = 5120, c.num_heads = 128, c.num_kv_heads = 128;
    c.kv_lora_rank = 512, c.q_lora_rank = 1536;
    c.qk_nope_dim = 128, c.rope_dim = 64, c.head_dim = 192, c.v_head_dim = 128;
    c.context_length = 131072;
    return c;
}

}  // namespace

std::vector<NamedModelConfig> named_model_configs() {
    return {
        {"SmolLM2-135M", multi_head(30, 576, 9, 3, 8192)},
        {"Llama-2-7B", multi_head(32, 4096, 32, 32, 4096)},
        {"Llama-3-8B", multi_head(32, 4096, 32, 8, 8192)},
        {"Falcon-7B", multi_head(32, 4544, 71, 1, 2048)},
        {"DeepSeek-V2", deepseek_v2()},
    };
}

std::string attention_label(const ModelConfig& c) {
    if (c.is_mla()) return fmt::format("MLA d_c={}", c.kv_lora_rank);
    if (c.num_kv_heads == c.num_heads) return "MHA";
    if (c.num_kv_heads == 1) return "MQA";
    return fmt::format("GQA {}:1", c.heads_per_kv_head());
}

KvFootprint kv_footprint(const ModelConfig& config, KvDtype dtype, int64_t budget_bytes) {
    KvFootprint f;
    f.dtype = dtype;
    f.bytes_per_token = kv_cache_bytes(config, 1, dtype);
    f.bytes_at_4k = kv_cache_bytes(config, 4096, dtype);
    f.bytes_at_32k = kv_cache_bytes(config, 32768, dtype);
    f.max_context_tokens = budget_bytes / f.bytes_per_token;
    f.concurrent_4k_requests = budget_bytes / f.bytes_at_4k;
    return f;
}

int64_t parse_byte_size(const std::string& text) {
    double number = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
    const std::string unit(end, text.data() + text.size());
    double multiplier = 0;
    if (unit.empty() || unit == "B") multiplier = 1;
    if (unit == "KiB") multiplier = 1024.0;
    if (unit == "MiB") multiplier = 1024.0 * 1024;
    if (unit == "GiB") multiplier = 1024.0 * 1024 * 1024;
    if (unit == "TiB") multiplier = 1024.0 * 1024 * 1024 * 1024;
    if (unit == "KB") multiplier = 1e3;
    if (unit == "MB") multiplier = 1e6;
    if (unit == "GB") multiplier = 1e9;
    if (unit == "TB") multiplier = 1e12;
    const double bytes = number * multiplier;
    if (ec != std::errc() || multiplier == 0 || !(bytes >= 1) || bytes > 1e18) {
        throw Error(fmt::format(
            "'{}' is not a memory size (examples: 16GiB, 512MiB, 80GB, 1000000)", text));
    }
    return int64_t(std::floor(bytes));
}

void check_kv_budget_fits(int64_t budget_bytes, int64_t memory_bytes, int64_t model_bytes,
                          const std::string& memory_name) {
    const int64_t room_bytes = memory_bytes - model_bytes;
    if (budget_bytes <= room_bytes) return;
    throw Error(fmt::format(
        "--kv-memory {}: more than the {} left beside the model ({} of {} less {} of weights)",
        format_bytes(budget_bytes), format_bytes(std::max<int64_t>(room_bytes, 0)), memory_name,
        format_bytes(memory_bytes), format_bytes(model_bytes)));
}

std::string format_bytes(int64_t bytes) {
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) return fmt::format("{} B", bytes);
    double value = double(bytes) / 1024;
    int unit = 0;
    while (value >= 1024 && unit < 3) value /= 1024, ++unit;
    return fmt::format("{:.2f} {}", value, units[unit]);
}

}  // namespace servelab
