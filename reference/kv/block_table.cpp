// block_table.cpp — see block_table.h. Lab 4's exercise: append_slot (with copy-on-write),
// fork, free.
#include "reference/kv/block_table.h"

#include <fmt/format.h>

#include "kernels/common/error.h"

namespace servelab {

BlockTable::BlockTable(int64_t block_size) : block_size_(block_size) {
    if (block_size < 1) throw Error(fmt::format("KV block size {} must be >= 1", block_size));
}

KvSlot BlockTable::slot(int64_t token) const {
    if (token < 0 || token >= num_tokens_) {
        throw Error(fmt::format("block table: token {} is not in [0, {})", token, num_tokens_));
    }
    return KvSlot{blocks_[size_t(token / block_size_)], token % block_size_};
}

AppendResult BlockTable::append_slot(BlockAllocator& allocator) {
    // BEGIN SOLUTION lab04
    // HINT: offset = num_tokens_ % block_size_; a new block only when offset == 0
    // HINT: a shared (ref_count > 1) partial last block: allocate your own, report
    // HINT: the BlockCopy, release the shared one (copy-on-write)
    // HINT: allocate before changing anything: on "out of blocks" the table stays as it was
    AppendResult result;
    const int64_t offset = num_tokens_ % block_size_;
    if (offset == 0) {
        // The last block is full (or there is none): a fresh block, ours alone.
        blocks_.push_back(allocator.allocate());
    } else if (allocator.ref_count(blocks_.back()) > 1) {
        // Copy-on-write: the partly filled last block is shared with a fork;
        // writing into it would change the other sequence's tokens.
        const BlockId own = allocator.allocate();
        result.copy = BlockCopy{blocks_.back(), own};
        allocator.release(blocks_.back());
        blocks_.back() = own;
    }
    result.slot = KvSlot{blocks_.back(), offset};
    ++num_tokens_;
    return result;
    // END SOLUTION
}

void BlockTable::append_full_block(BlockId block, BlockAllocator& allocator) {
    if (num_tokens_ % block_size_ != 0) {
        throw Error(fmt::format("block table: a full block cannot follow a partial one ({} tokens)",
                                num_tokens_));
    }
    allocator.retain(block);
    blocks_.push_back(block);
    num_tokens_ += block_size_;
}

BlockTable BlockTable::fork(BlockAllocator& allocator) const {
    // BEGIN SOLUTION lab04
    // HINT: the copy holds the same blocks: one more holder for each
    for (BlockId block : blocks_) allocator.retain(block);
    return *this;
    // END SOLUTION
}

void BlockTable::free(BlockAllocator& allocator) {
    // BEGIN SOLUTION lab04
    // HINT: release every block, then empty the table
    for (BlockId block : blocks_) allocator.release(block);
    blocks_.clear();
    num_tokens_ = 0;
    // END SOLUTION
}

}  // namespace servelab
