// paged_kv_cache.h — the KV memory of all layers as one pool of fixed-size blocks.
//
// Lab 4 (chapter 11.4, PagedAttention). Where Lab 2's KvCache reserves
// max_tokens rows for one sequence up front, the paged cache holds
// num_blocks blocks of block_size token rows per layer, shared by every
// sequence; a sequence's BlockTable (block_table.h) says which blocks hold
// its tokens. The pool is sized from a memory budget, not from a maximum
// length, and a sequence takes blocks only as it grows.
//   keys[layer], values[layer]: (num_blocks · block_size, num_kv_heads, head_dim) fp32
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "reference/kv/block_allocator.h"
#include "reference/kv/block_table.h"
#include "reference/model/model_config.h"

namespace servelab {

// Where the pool's rows live. kHost: here, in keys()/values(). kDevice: in
// a GPU's memory, owned by the device runner (reference/device/); this
// object then keeps only the bookkeeping — the allocator, whose block ids
// index the device pool the same way.
enum class KvStorage { kHost, kDevice };

class PagedKvCache {
  public:
    // Throws servelab::Error for an MLA model (not paged yet), block_size < 1
    // or num_blocks < 1.
    PagedKvCache(const ModelConfig& config, int64_t num_blocks, int64_t block_size,
                 KvStorage storage = KvStorage::kHost);

    // Bytes of one block across all layers (keys and values): the unit the
    // budget is divided into.
    static int64_t block_bytes(const ModelConfig& config, int64_t block_size);
    // The most blocks whose memory fits `budget_bytes` (at least 1).
    static int64_t blocks_for_budget(const ModelConfig& config, int64_t block_size,
                                     int64_t budget_bytes);

    int64_t block_size() const { return block_size_; }
    KvStorage storage() const { return storage_; }
    int64_t num_blocks() const { return allocator_.num_blocks(); }
    BlockAllocator& allocator() { return allocator_; }
    const BlockAllocator& allocator() const { return allocator_; }

    // Stores `count` tokens' k and v, (count, num_kv_heads, head_dim), at
    // positions [start_position, start_position + count) of the sequence
    // `table` maps; their slots must already be appended to the table.
    void write(int64_t layer, const BlockTable& table, int64_t start_position, const float* k,
               const float* v, int64_t count);
    // Copy-on-write: block `copy.from`'s rows to block `copy.to`, in every
    // layer. (Nothing to copy here with kDevice storage: the layers are empty.)
    void copy_block(const BlockCopy& copy);

    const float* keys(int64_t layer) const { return keys_[size_t(layer)].get(); }
    const float* values(int64_t layer) const { return values_[size_t(layer)].get(); }
    int64_t allocated_bytes() const;

  private:
    int64_t block_size_;
    KvStorage storage_;
    int64_t kv_dim_;  // floats per token row
    BlockAllocator allocator_;
    int64_t floats_per_layer_;
    // Left uninitialized: the operating system maps a page only when a block
    // on it is first written, so a large budget costs memory only as it fills.
    std::vector<std::unique_ptr<float[]>> keys_;    // (num_layers)
    std::vector<std::unique_ptr<float[]>> values_;  // (num_layers)
};

}  // namespace servelab
