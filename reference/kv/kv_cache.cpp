// kv_cache.cpp — see kv_cache.h. Lab 2's exercises: kv_cache_bytes and KvCache::write.
#include "reference/kv/kv_cache.h"

#include <fmt/format.h>

#include <cstring>

#include "reference/common/error.h"

namespace servelab {

int64_t kv_dtype_bytes(KvDtype dtype) {
    switch (dtype) {
        case KvDtype::kF32:
            return 4;
        case KvDtype::kF16:
        case KvDtype::kBF16:
            return 2;
        case KvDtype::kInt8:
            return 1;
    }
    return 4;
}

int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, KvDtype dtype) {
    // BEGIN SOLUTION lab02
    // HINT: one K and one V vector of num_kv_heads * head_dim elements per token per layer
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * seq_len *
           kv_dtype_bytes(dtype);
    // END SOLUTION
}

KvCache::KvCache(const ModelConfig& config, int64_t max_tokens)
    : num_layers_(config.num_layers), max_tokens_(max_tokens), kv_dim_(config.kv_dim()) {
    if (max_tokens < 1 || max_tokens > config.context_length) {
        throw Error(fmt::format("KV cache: {} tokens is outside [1, context length {}]", max_tokens,
                                config.context_length));
    }
    keys_.assign(size_t(num_layers_), std::vector<float>(size_t(max_tokens_ * kv_dim_)));
    values_.assign(size_t(num_layers_), std::vector<float>(size_t(max_tokens_ * kv_dim_)));
}

void KvCache::write(int64_t layer, int64_t start_position, const float* k, const float* v,
                    int64_t count) {
    if (start_position != num_tokens_ || start_position + count > max_tokens_) {
        throw Error(
            fmt::format("KV cache: cannot write positions [{}, {}) into a cache holding "
                        "{} of {} tokens",
                        start_position, start_position + count, num_tokens_, max_tokens_));
    }
    // BEGIN SOLUTION lab02
    // HINT: token t's kv_dim floats go to row start_position + t of keys_ and values_
    const size_t bytes = size_t(count * kv_dim_) * sizeof(float);
    std::memcpy(keys_[size_t(layer)].data() + start_position * kv_dim_, k, bytes);
    std::memcpy(values_[size_t(layer)].data() + start_position * kv_dim_, v, bytes);
    // END SOLUTION
}

void KvCache::commit(int64_t count) {
    num_tokens_ += count;
}

const float* KvCache::keys(int64_t layer) const {
    return keys_[size_t(layer)].data();
}
const float* KvCache::values(int64_t layer) const {
    return values_[size_t(layer)].data();
}

int64_t KvCache::allocated_bytes() const {
    int64_t bytes = 0;
    for (const auto& layer : keys_) bytes += int64_t(layer.size() * sizeof(float));
    for (const auto& layer : values_) bytes += int64_t(layer.size() * sizeof(float));
    return bytes;
}

}  // namespace servelab
