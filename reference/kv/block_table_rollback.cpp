// block_table_rollback.cpp — BlockTable::truncate: drop a sequence's last slots (rollback).
//
// Lab 6 (chapter 11.6, speculative decoding). A verification step writes
// the keys and values of every drafted token; the ones the target rejects
// must leave the cache again, or the next step would attend to tokens the
// output never contained. Rolling back is only bookkeeping: the table
// forgets the slots past the new end, and blocks that then hold none of its
// tokens go back to the pool. Their rows need no clearing — nothing reads a
// row past a sequence's end, and the next append overwrites it. A partly
// kept last block stays, shared or not: if a fork shares it, the next
// append copies it first (copy-on-write), as always.
#include <fmt/format.h>

#include "kernels/common/error.h"
#include "reference/kv/block_table.h"

namespace servelab {

void BlockTable::truncate(int64_t num_tokens, BlockAllocator& allocator) {
    // BEGIN SOLUTION lab06
    // HINT: refuse num_tokens outside [0, num_tokens()] with a servelab::Error
    // HINT: keep ceil(num_tokens / block_size_) blocks; release the others to `allocator`,
    // HINT: last first; then the table holds num_tokens tokens
    if (num_tokens < 0 || num_tokens > num_tokens_) {
        throw Error(
            fmt::format("block table: cannot truncate {} tokens to {}", num_tokens_, num_tokens));
    }
    const size_t blocks_kept = size_t((num_tokens + block_size_ - 1) / block_size_);
    while (blocks_.size() > blocks_kept) {
        allocator.release(blocks_.back());
        blocks_.pop_back();
    }
    num_tokens_ = num_tokens;
    // END SOLUTION
}

}  // namespace servelab
