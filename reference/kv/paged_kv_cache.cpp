// paged_kv_cache.cpp — see paged_kv_cache.h. Lab 4's exercise: copy_block (copy-on-write).
#include "reference/kv/paged_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kernels/common/error.h"

namespace servelab {

PagedKvCache::PagedKvCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size,
                           KvStorage storage)
    : block_size_(block_size), storage_(storage), kv_dim_(config.kv_dim()), allocator_(num_blocks) {
    if (config.is_mla()) throw Error("paged KV cache: MLA models are not paged yet");
    if (block_size < 1) throw Error(fmt::format("KV block size {} must be >= 1", block_size));
    floats_per_layer_ = num_blocks * block_size * kv_dim_;
    if (storage == KvStorage::kDevice) return;  // the device runner holds the rows
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
        keys_.push_back(std::unique_ptr<float[]>(new float[size_t(floats_per_layer_)]));
        values_.push_back(std::unique_ptr<float[]>(new float[size_t(floats_per_layer_)]));
    }
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
    if (storage_ == KvStorage::kDevice) {
        throw Error("paged KV cache: this pool lives on the GPU; the CPU runner cannot write it");
    }
    const size_t row_bytes = size_t(kv_dim_) * sizeof(float);
    for (int64_t t = 0; t < count; ++t) {
        const KvSlot slot = table.slot(start_position + t);
        const int64_t row = int64_t(slot.block) * block_size_ + slot.offset;
        std::memcpy(keys_[size_t(layer)].get() + row * kv_dim_, k + t * kv_dim_, row_bytes);
        std::memcpy(values_[size_t(layer)].get() + row * kv_dim_, v + t * kv_dim_, row_bytes);
    }
}

void PagedKvCache::copy_block(const BlockCopy& copy) {
    // BEGIN SOLUTION lab04
    // HINT: a block is block_size rows of kv_dim_ floats, in every layer's keys AND values
    const int64_t block_floats = block_size_ * kv_dim_;
    for (auto* pools : {&keys_, &values_}) {
        for (const std::unique_ptr<float[]>& pool : *pools) {
            std::copy_n(pool.get() + copy.from * block_floats, block_floats,
                        pool.get() + copy.to * block_floats);
        }
    }
    // END SOLUTION
}

int64_t PagedKvCache::allocated_bytes() const {
    return 2 * int64_t(keys_.size()) * floats_per_layer_ * int64_t(sizeof(float));
}

}  // namespace servelab
