// kv_cache.cpp — see kv_cache.h. Lab 2's exercises: kv_cache_bytes and KvCache::write.
#include "reference/kv/kv_cache.h"

#include <fmt/format.h>

#include "kernels/common/error.h"

namespace servelab {

KvLayout kv_layout(const ModelConfig& config) {
    if (config.is_mla()) {
        return KvLayout{.keys = {1, config.rope_dim}, .values = {1, config.kv_lora_rank}};
    }
    const KvTensorShape per_token{config.num_kv_heads, config.head_dim};
    return KvLayout{.keys = per_token, .values = per_token};
}

int64_t kv_cache_bytes(const ModelConfig& config, int64_t seq_len, KvDtype dtype) {
    const KvLayout layout = kv_layout(config);
    // BEGIN SOLUTION lab02
    // HINT: per token per layer: layout.keys and layout.values elements of
    // HINT: kv_dtype_bytes(dtype), plus, when kv_dtype_has_scales(dtype), one 4-byte
    // HINT: scale per head of each
    const int64_t elements = layout.keys.elements() + layout.values.elements();
    const int64_t scales =
        kv_dtype_has_scales(dtype) ? layout.keys.num_heads + layout.values.num_heads : 0;
    const int64_t bytes_per_token_per_layer =
        elements * kv_dtype_bytes(dtype) + scales * int64_t(sizeof(float));
    return config.num_layers * seq_len * bytes_per_token_per_layer;
    // END SOLUTION
}

KvCache::KvCache(const ModelConfig& config, int64_t max_tokens, KvDtype dtype)
    : dtype_(dtype), layout_(kv_layout(config)), max_tokens_(max_tokens) {
    if (max_tokens < 1 || max_tokens > config.context_length) {
        throw Error(fmt::format("KV cache: {} tokens is outside [1, context length {}]", max_tokens,
                                config.context_length));
    }
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
        keys_.push_back(make_tensor(layout_.keys));
        values_.push_back(make_tensor(layout_.values));
    }
}

KvCache::Tensor KvCache::make_tensor(const KvTensorShape& shape) const {
    Tensor tensor;
    tensor.shape = shape;
    tensor.data.resize(size_t(max_tokens_ * shape.elements() * kv_dtype_bytes(dtype_)));
    if (kv_dtype_has_scales(dtype_)) tensor.scales.resize(size_t(max_tokens_ * shape.num_heads));
    return tensor;
}

void KvCache::write(int64_t layer, int64_t start_position, const float* k, const float* v,
                    int64_t count) {
    if (start_position != num_tokens_ || start_position + count > max_tokens_) {
        throw Error(
            fmt::format("KV cache: cannot write positions [{}, {}) into a cache holding "
                        "{} of {} tokens",
                        start_position, start_position + count, num_tokens_, max_tokens_));
    }
    write_tensor(keys_[size_t(layer)], start_position, k, count);
    write_tensor(values_[size_t(layer)], start_position, v, count);
}

// Token t's heads go to row start_position + t, each head encoded on its own
// (its own scale, for int8/fp8).
void KvCache::write_tensor(Tensor& tensor, int64_t start_position, const float* rows,
                           int64_t count) {
    // BEGIN SOLUTION lab02
    // HINT: (token t, head h) is row (start_position + t) * num_heads + h of tensor.data,
    // HINT: head_dim elements of kv_dtype_bytes(dtype_) bytes; kv_encode_row() encodes one
    // HINT: row and returns its scale, for the same row of tensor.scales (if it has any)
    const int64_t head_dim = tensor.shape.head_dim;
    const int64_t element_bytes = kv_dtype_bytes(dtype_);
    for (int64_t t = 0; t < count; ++t) {
        for (int64_t head = 0; head < tensor.shape.num_heads; ++head) {
            const int64_t row = (start_position + t) * tensor.shape.num_heads + head;
            const float* source = rows + (t * tensor.shape.num_heads + head) * head_dim;
            const float scale = kv_encode_row(dtype_, source, head_dim,
                                              tensor.data.data() + row * head_dim * element_bytes);
            if (!tensor.scales.empty()) tensor.scales[size_t(row)] = scale;
        }
    }
    // END SOLUTION
}

void KvCache::commit(int64_t count) {
    num_tokens_ += count;
}

KvView KvCache::view(const Tensor& tensor) const {
    return KvView{.dtype = dtype_,
                  .data = tensor.data.data(),
                  .scales = tensor.scales.empty() ? nullptr : tensor.scales.data(),
                  .num_heads = tensor.shape.num_heads,
                  .head_dim = tensor.shape.head_dim};
}

KvView KvCache::keys(int64_t layer) const {
    return view(keys_[size_t(layer)]);
}
KvView KvCache::values(int64_t layer) const {
    return view(values_[size_t(layer)]);
}

int64_t KvCache::allocated_bytes() const {
    int64_t bytes = 0;
    for (const auto* tensors : {&keys_, &values_}) {
        for (const Tensor& tensor : *tensors) {
            bytes += int64_t(tensor.data.size() + tensor.scales.size() * sizeof(float));
        }
    }
    return bytes;
}

}  // namespace servelab
