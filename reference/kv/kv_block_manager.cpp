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

KvBlockManager::KvBlockManager(PagedKvCache& cache, PrefixCacheKind prefix_cache)
    : cache_(cache),
      prefix_cache_kind_(prefix_cache),
      prefix_cache_(make_prefix_index(prefix_cache, cache.allocator(), cache.block_size())) {}

PagedSequence KvBlockManager::start(std::span<const TokenId> prompt) {
    PagedSequence sequence(cache_.block_size());
    if (!prefix_cache_ || prompt.empty()) return sequence;
    // Only blocks that end before the prompt's last token: that token is
    // computed in any case.
    const int64_t max_hit_blocks = (int64_t(prompt.size()) - 1) / cache_.block_size();
    PrefixMatch hits = prefix_cache_->match(prompt, max_hit_blocks);
    for (const BlockId block : hits.blocks) {
        sequence.table.append_full_block(block, cache_.allocator());
    }
    sequence.prefix_node = hits.node;
    sequence.num_named_blocks = int64_t(hits.blocks.size());
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
    const int64_t full_blocks = sequence.num_computed_tokens / cache_.block_size();
    if (full_blocks <= sequence.num_named_blocks) return;
    // Blocks whose content is cached already under another block simply
    // stay uncached; the sequence's place in the cache moves on either way.
    const auto blocks =
        std::span<const BlockId>(sequence.table.blocks()).first(size_t(full_blocks));
    sequence.prefix_node = prefix_cache_->insert(tokens, blocks, sequence.prefix_node);
    sequence.num_named_blocks = full_blocks;
}

PagedSequence KvBlockManager::fork(const PagedSequence& sequence) {
    PagedSequence copy = sequence;
    copy.table = sequence.table.fork(cache_.allocator());
    if (prefix_cache_) prefix_cache_->lock(copy.prefix_node);  // two holders now
    return copy;
}

void KvBlockManager::finish(PagedSequence& sequence) {
    if (prefix_cache_) prefix_cache_->release(sequence.prefix_node, sequence.table.blocks());
    sequence.table.free(cache_.allocator());
    sequence.num_computed_tokens = 0;
    sequence.num_named_blocks = 0;
    sequence.prefix_node = kNoPrefixNode;
}

void KvBlockManager::rollback(PagedSequence& sequence, int64_t num_tokens) {
    sequence.table.truncate(num_tokens, cache_.allocator());
    sequence.num_computed_tokens = std::min(sequence.num_computed_tokens, num_tokens);
    // Only blocks still full of the sequence's tokens count as named.
    sequence.num_named_blocks =
        std::min(sequence.num_named_blocks, num_tokens / cache_.block_size());
}

int64_t KvBlockManager::clear_prefix_cache() {
    int64_t evicted = 0;
    while (prefix_cache_ && prefix_cache_->evict_one()) ++evicted;
    return evicted;
}

int64_t KvBlockManager::cached_prefix_tokens(std::span<const TokenId> prompt) const {
    if (!prefix_cache_) return 0;
    return prefix_cache_->cached_prefix_blocks(prompt) * cache_.block_size();
}

int64_t KvBlockManager::num_available_blocks() const {
    const int64_t evictable = prefix_cache_ ? prefix_cache_->num_evictable() : 0;
    return cache_.allocator().num_free() + evictable;
}

}  // namespace servelab
