// block_table.h — one sequence's map from logical KV blocks to physical ones.
//
// Lab 4 (chapter 11.4, PagedAttention). Token t of a sequence lives in
// logical block t / block_size at offset t % block_size; blocks()[logical]
// names the physical block, like a page table. Appending a token needs a new
// block only when the last one is full, so a sequence wastes at most
// block_size - 1 slots (internal fragmentation), whatever its final length.
//
// Forking (n > 1 completions of one prompt) copies the table, not the KV
// data: both tables hold the same blocks, with reference counts raised. A
// block is written only by the table that appends to it, and a shared last
// block is copied first (copy-on-write): append_slot then returns the copy
// the cache must make before writing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "reference/kv/block_allocator.h"

namespace servelab {

// Where one token's keys and values go.
struct KvSlot {
    BlockId block = 0;
    int64_t offset = 0;  // in [0, block_size)
};

// A block copy the cache must make (all layers) before writing the new slot.
struct BlockCopy {
    BlockId from = 0;
    BlockId to = 0;
};

struct AppendResult {
    KvSlot slot;
    std::optional<BlockCopy> copy;
};

class BlockTable {
  public:
    explicit BlockTable(int64_t block_size);  // throws servelab::Error unless block_size >= 1

    int64_t block_size() const { return block_size_; }
    int64_t num_tokens() const { return num_tokens_; }
    const std::vector<BlockId>& blocks() const { return blocks_; }
    // The slot of an already appended token.
    KvSlot slot(int64_t token) const;

    // Reserves the next token's slot. Throws servelab::Error when a block is
    // needed and the pool has none (the table is then unchanged).
    AppendResult append_slot(BlockAllocator& allocator);
    // Appends an already computed full block (a prefix-cache hit) and
    // retains it. The table must end on a block boundary.
    void append_full_block(BlockId block, BlockAllocator& allocator);
    // A table sharing every block of this one (each block's count + 1).
    BlockTable fork(BlockAllocator& allocator) const;
    // Releases every block and empties the table.
    void free(BlockAllocator& allocator);
    // Speculative decoding's rollback (Lab 6): keeps the first `num_tokens`
    // slots and releases the blocks past them (block_table_rollback.cpp).
    // Throws servelab::Error unless 0 <= num_tokens <= num_tokens().
    void truncate(int64_t num_tokens, BlockAllocator& allocator);

  private:
    int64_t block_size_;
    int64_t num_tokens_ = 0;
    std::vector<BlockId> blocks_;  // (ceil(num_tokens / block_size))
};

}  // namespace servelab
