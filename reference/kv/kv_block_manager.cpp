// kv_block_manager.cpp — see kv_block_manager.h.
#include "reference/kv/kv_block_manager.h"

#include <algorithm>
#include <utility>

namespace servelab {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

}  // namespace

KvBlockManager::KvBlockManager(PagedKvCache& cache, bool enable_prefix_caching) : cache_(cache) {
    if (enable_prefix_caching) prefix_cache_.emplace(cache_.allocator());
}

PagedSequence KvBlockManager::start(std::span<const TokenId> prompt) {
    PagedSequence sequence(cache_.block_size());
    if (!prefix_cache_ || prompt.empty()) return sequence;
    const int64_t block_size = cache_.block_size();
    // Only blocks that end before the prompt's last token: that token is
    // computed in any case.
    const int64_t max_hit_blocks = (int64_t(prompt.size()) - 1) / block_size;
    std::vector<BlockId> hits;
    BlockHash parent = kRootBlockHash;
    for (int64_t i = 0; i < max_hit_blocks; ++i) {
        const auto block_tokens = prompt.subspan(size_t(i * block_size), size_t(block_size));
        const std::optional<BlockId> block = prefix_cache_->lookup(parent, block_tokens);
        if (!block) break;
        sequence.table.append_full_block(*block, cache_.allocator());
        parent = hash_block(parent, block_tokens);
        sequence.block_hashes.push_back(parent);
        hits.push_back(*block);
    }
    prefix_cache_->touch(hits);
    sequence.num_computed_tokens = sequence.table.num_tokens();
    sequence.num_cached_prompt_tokens = sequence.num_computed_tokens;
    return sequence;
}

std::vector<BlockCopy> KvBlockManager::take_block_copies() {
    return std::exchange(pending_copies_, {});
}

int64_t KvBlockManager::blocks_needed(const BlockTable& table, int64_t count) const {
    const int64_t block_size = table.block_size();
    const int64_t have = ceil_div(table.num_tokens(), block_size);
    const int64_t want = ceil_div(table.num_tokens() + count, block_size);
    const bool copy_on_write = table.num_tokens() % block_size != 0 &&
                               cache_.allocator().ref_count(table.blocks().back()) > 1;
    return want - have + (copy_on_write ? 1 : 0);
}

bool KvBlockManager::reserve(PagedSequence& sequence, int64_t count) {
    const int64_t needed = blocks_needed(sequence.table, count);
    BlockAllocator& allocator = cache_.allocator();
    while (allocator.num_free() < needed && prefix_cache_ && prefix_cache_->evict_one()) {
    }
    if (allocator.num_free() < needed) return false;
    for (int64_t i = 0; i < count; ++i) {
        const AppendResult appended = sequence.table.append_slot(allocator);
        if (!appended.copy) continue;
        cache_.copy_block(*appended.copy);
        if (cache_.storage() == KvStorage::kDevice) pending_copies_.push_back(*appended.copy);
    }
    return true;
}

void KvBlockManager::commit(PagedSequence& sequence, std::span<const TokenId> tokens) {
    sequence.num_computed_tokens = sequence.table.num_tokens();
    if (!prefix_cache_) return;
    const int64_t block_size = cache_.block_size();
    const int64_t full_blocks = sequence.num_computed_tokens / block_size;
    for (int64_t i = int64_t(sequence.block_hashes.size()); i < full_blocks; ++i) {
        const BlockHash parent = i == 0 ? kRootBlockHash : sequence.block_hashes[size_t(i - 1)];
        const auto block_tokens = tokens.subspan(size_t(i * block_size), size_t(block_size));
        // If this content is already cached under another block, this block
        // simply stays uncached; the chain goes on either way.
        prefix_cache_->insert(parent, block_tokens, sequence.table.blocks()[size_t(i)]);
        sequence.block_hashes.push_back(hash_block(parent, block_tokens));
    }
}

PagedSequence KvBlockManager::fork(const PagedSequence& sequence) {
    PagedSequence copy = sequence;
    copy.table = sequence.table.fork(cache_.allocator());
    return copy;
}

void KvBlockManager::finish(PagedSequence& sequence) {
    if (prefix_cache_) {
        // Last block first, so that the first block is the most recently used.
        std::vector<BlockId> last_to_first(sequence.table.blocks().rbegin(),
                                           sequence.table.blocks().rend());
        prefix_cache_->touch(last_to_first);
    }
    sequence.table.free(cache_.allocator());
    sequence.num_computed_tokens = 0;
    sequence.block_hashes.clear();
}

void KvBlockManager::rollback(PagedSequence& sequence, int64_t num_tokens) {
    sequence.table.truncate(num_tokens, cache_.allocator());
    sequence.num_computed_tokens = std::min(sequence.num_computed_tokens, num_tokens);
    // Only blocks still full of the sequence's tokens keep their hashes.
    const size_t full_blocks = size_t(num_tokens / cache_.block_size());
    if (sequence.block_hashes.size() > full_blocks) sequence.block_hashes.resize(full_blocks);
}

int64_t KvBlockManager::clear_prefix_cache() {
    int64_t evicted = 0;
    while (prefix_cache_ && prefix_cache_->evict_one()) ++evicted;
    return evicted;
}

int64_t KvBlockManager::num_available_blocks() const {
    const int64_t evictable = prefix_cache_ ? prefix_cache_->num_evictable() : 0;
    return cache_.allocator().num_free() + evictable;
}

}  // namespace servelab
