// paged_kv_cache.cpp — see paged_kv_cache.h.
#include "reference/kv/paged_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "reference/common/error.h"

namespace servelab {

PagedKvCache::PagedKvCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size)
    : block_size_(block_size), kv_dim_(config.kv_dim()), allocator_(num_blocks) {
    if (config.is_mla()) throw Error("paged KV cache: MLA models are not paged yet");
    if (block_size < 1) throw Error(fmt::format("KV block size {} must be >= 1", block_size));
    const size_t floats = size_t(num_blocks * block_size * kv_dim_);
    keys_.assign(size_t(config.num_layers), std::vector<float>(floats));
    values_.assign(size_t(config.num_layers), std::vector<float>(floats));
}

int64_t PagedKvCache::block_bytes(const ModelConfig& config, int64_t block_size) {
    return 2 * config.num_layers * block_size * config.kv_dim() * int64_t(sizeof(float));
}

int64_t PagedKvCache::blocks_for_budget(const ModelConfig& config, int64_t block_size,
                                        int64_t budget_bytes) {
    return std::max<int64_t>(1, budget_bytes / block_bytes(config, block_size));
}

void PagedKvCache::write(int64_t layer, const BlockTable& table, int64_t start_position,
                         const float* k, const float* v, int64_t count) {
    const size_t row_bytes = size_t(kv_dim_) * sizeof(float);
    for (int64_t t = 0; t < count; ++t) {
        const KvSlot slot = table.slot(start_position + t);
        const int64_t row = int64_t(slot.block) * block_size_ + slot.offset;
        std::memcpy(keys_[size_t(layer)].data() + row * kv_dim_, k + t * kv_dim_, row_bytes);
        std::memcpy(values_[size_t(layer)].data() + row * kv_dim_, v + t * kv_dim_, row_bytes);
    }
}

void PagedKvCache::copy_block(const BlockCopy& copy) {
    const int64_t block_floats = block_size_ * kv_dim_;
    for (auto* pools : {&keys_, &values_}) {
        for (std::vector<float>& pool : *pools) {
            std::copy_n(pool.begin() + copy.from * block_floats, block_floats,
                        pool.begin() + copy.to * block_floats);
        }
    }
}

int64_t PagedKvCache::allocated_bytes() const {
    int64_t bytes = 0;
    for (const auto* pools : {&keys_, &values_}) {
        for (const auto& pool : *pools) bytes += int64_t(pool.size() * sizeof(float));
    }
    return bytes;
}

}  // namespace servelab
