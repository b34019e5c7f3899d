// block_allocator.h — the physical KV blocks of a paged cache: free list and reference counts.
//
// Lab 4 (chapter 11.4, PagedAttention; Kwon et al., 2023). A paged KV cache
// cuts the memory of all layers into `num_blocks` physical blocks of
// `block_size` tokens each. Sequences do not own memory; they hold block ids
// (block_table.h). A block's reference count is the number of block tables
// that hold it: 1 normally, more when sequences share a prefix (a fork for
// parallel sampling, or the prefix cache). A block returns to the free list
// when its count drops to 0, so shared blocks are freed exactly once.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace servelab {

using BlockId = int32_t;

class BlockAllocator {
  public:
    // Throws servelab::Error unless num_blocks is in [1, 2^31).
    explicit BlockAllocator(int64_t num_blocks);

    int64_t num_blocks() const { return int64_t(ref_counts_.size()); }
    int64_t num_free() const { return int64_t(free_list_.size()); }
    int64_t num_used() const { return num_blocks() - num_free(); }

    // A free block, now with reference count 1, or nullopt when none is free.
    std::optional<BlockId> try_allocate();
    // The same, but throws servelab::Error ("out of KV-cache blocks") when none is free.
    BlockId allocate();
    // One more table holds `block` (it must be in use).
    void retain(BlockId block);
    // One table fewer holds `block`; at 0 it is free again. Throws
    // servelab::Error for a block that is not in use (a double free).
    void release(BlockId block);
    int32_t ref_count(BlockId block) const;

  private:
    void check_in_use(BlockId block, const char* operation) const;

    std::vector<int32_t> ref_counts_;  // (num_blocks): 0 = free
    std::vector<BlockId> free_list_;   // a stack: the most recently freed block is reused first
};

}  // namespace servelab
