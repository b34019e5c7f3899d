// block_allocator.cpp — see block_allocator.h. Lab 4's exercise: allocate, retain, release.
#include "reference/kv/block_allocator.h"

#include <fmt/format.h>

#include <limits>

#include "kernels/common/error.h"

namespace servelab {

BlockAllocator::BlockAllocator(int64_t num_blocks) {
    if (num_blocks < 1 || num_blocks > std::numeric_limits<BlockId>::max()) {
        throw Error(fmt::format("KV block pool: {} blocks is out of range", num_blocks));
    }
    ref_counts_.assign(size_t(num_blocks), 0);
    // Pushed in reverse so that blocks are handed out 0, 1, 2, ... at first.
    for (int64_t block = num_blocks - 1; block >= 0; --block) free_list_.push_back(BlockId(block));
}

std::optional<BlockId> BlockAllocator::try_allocate() {
    // BEGIN SOLUTION lab04
    // HINT: take the top of free_list_ (nullopt if empty); its count becomes 1
    if (free_list_.empty()) return std::nullopt;
    const BlockId block = free_list_.back();
    free_list_.pop_back();
    ref_counts_[size_t(block)] = 1;
    return block;
    // END SOLUTION
}

BlockId BlockAllocator::allocate() {
    const std::optional<BlockId> block = try_allocate();
    if (!block) {
        throw Error(fmt::format("out of KV-cache blocks (all {} in use)", num_blocks()));
    }
    return *block;
}

void BlockAllocator::check_in_use(BlockId block, const char* operation) const {
    if (block < 0 || block >= num_blocks()) {
        throw Error(fmt::format("KV block pool: {} of block {}, outside [0, {})", operation, block,
                                num_blocks()));
    }
    if (ref_counts_[size_t(block)] == 0) {
        throw Error(fmt::format("KV block pool: {} of block {}, which is free", operation, block));
    }
}

void BlockAllocator::retain(BlockId block) {
    // BEGIN SOLUTION lab04
    // HINT: check_in_use(block, "retain") first: only a block in use can gain a holder
    check_in_use(block, "retain");
    ++ref_counts_[size_t(block)];
    // END SOLUTION
}

void BlockAllocator::release(BlockId block) {
    // BEGIN SOLUTION lab04
    // HINT: check_in_use(block, "release") catches double frees; at count 0 it is free again
    check_in_use(block, "release");
    if (--ref_counts_[size_t(block)] == 0) free_list_.push_back(block);
    // END SOLUTION
}

int32_t BlockAllocator::ref_count(BlockId block) const {
    if (block < 0 || block >= num_blocks()) {
        throw Error(fmt::format("KV block pool: no block {}", block));
    }
    return ref_counts_[size_t(block)];
}

}  // namespace servelab
