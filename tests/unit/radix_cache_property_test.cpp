// radix_cache_property_test.cpp — Lab 11's property test: random prompts, forks, finishes and
// evictions against a brute-force model of the radix cache, checked after every operation.
//
// The model has no tree. It knows every cached prefix (whole blocks) with its block and the
// last time a request's path covered it, and how much of its prompt each live sequence holds
// (after match: the matched blocks; after insert: all of them). As in the engine, a request is
// matched when it is admitted and inserted later, once its blocks are computed, so other
// requests match, insert and evict in between (two that computed the same blocks meanwhile:
// the tree keeps the first one's). From that alone the model predicts, after each operation —
// match, lock (a fork), every eviction (also those between a match and its insert, to make
// room), insert, finish:
//   - the cached prefixes and their blocks;
//   - num_evictable(): the cached blocks on no live sequence's held prefix;
//   - the block evict_one frees: the last block of the least recently used unlocked leaf;
//   - every block's reference count: the cache (if cached) and each sequence holding it;
// and the tree's own invariants (check_invariants, radix_cache.h) must hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "reference/kv/block_allocator.h"
#include "reference/kv/radix_cache.h"
#include "tests/unit/radix_test_util.h"

namespace servelab {
namespace {

using test::cached_prefixes;
using test::Sequence;
using test::show;

constexpr int64_t kBlock = test::kRadixBlock;
using Key = std::vector<TokenId>;  // a prefix: whole blocks of tokens

Key prefix_of(const std::vector<TokenId>& tokens, int64_t num_blocks) {
    return Key(tokens.begin(), tokens.begin() + num_blocks * kBlock);
}

bool starts_with(const std::vector<TokenId>& tokens, const Key& prefix) {
    return tokens.size() >= prefix.size() &&
           std::equal(prefix.begin(), prefix.end(), tokens.begin());
}

// A live sequence and the prefix its node covers: its lock.
struct Live {
    Sequence seq;
    int64_t held_blocks = 0;
    bool inserted = false;  // its computed blocks named in the tree (insert)
};

struct Model {
    struct Prefix {
        BlockId block;
        uint64_t used;  // the last time a touched path covered it
    };
    std::map<Key, Prefix> cached;
    std::vector<Live> live;
    uint64_t clock = 0;

    // A match, insert or release touches its path, root to end, as a whole.
    void touch(const std::vector<TokenId>& tokens, int64_t num_blocks) {
        ++clock;
        for (int64_t k = 1; k <= num_blocks; ++k) {
            const auto found = cached.find(prefix_of(tokens, k));
            if (found != cached.end()) found->second.used = clock;
        }
    }
    std::vector<BlockId> longest_match(const std::vector<TokenId>& tokens,
                                       int64_t max_blocks) const {
        std::vector<BlockId> blocks;
        for (int64_t k = 1; k <= max_blocks; ++k) {
            const auto found = cached.find(prefix_of(tokens, k));
            if (found == cached.end()) break;
            blocks.push_back(found->second.block);
        }
        return blocks;
    }
    // On some live sequence's held prefix: locked.
    bool held(const Key& key) const {
        return std::any_of(live.begin(), live.end(), [&key](const Live& l) {
            return int64_t(key.size()) <= l.held_blocks * kBlock && starts_with(l.seq.tokens, key);
        });
    }
    int64_t evictable() const {
        return std::count_if(cached.begin(), cached.end(),
                             [this](const auto& entry) { return !held(entry.first); });
    }
    // No cached block after it: the last block of a leaf. (The keys that extend
    // `key` are the ones right after it in the map's order.)
    bool ends_a_leaf(const Key& key) const {
        const auto next = cached.upper_bound(key);
        return next == cached.end() || !starts_with(next->first, key);
    }
    // What evict_one may free: the last block of the least recently used unlocked leaf.
    std::vector<Key> next_victims() const {
        std::vector<Key> oldest;
        uint64_t when = UINT64_MAX;
        for (const auto& [key, prefix] : cached) {
            if (held(key) || !ends_a_leaf(key) || prefix.used > when) continue;
            if (prefix.used < when) oldest.clear();
            when = prefix.used;
            oldest.push_back(key);
        }
        return oldest;
    }
};

enum class Op { kMatch, kLock, kEvict, kInsert, kFinish };

const char* op_name(Op op) {
    switch (op) {
        case Op::kMatch:
            return "match";
        case Op::kLock:
            return "lock (a fork)";
        case Op::kEvict:
            return "evict_one";
        case Op::kInsert:
            return "insert";
        case Op::kFinish:
            return "finish (release)";
    }
    return "?";
}

// Why num_evictable() disagrees with the model after `op`, in the student's terms.
std::string why_evictable_differs(Op op, bool too_many) {
    switch (op) {
        case Op::kMatch:
            return too_many ? "blocks a running request matched are still evictable: a match "
                              "that does not split the node where the prompt diverges, and "
                              "locks its parent instead, leaves them unlocked"
                            : "blocks no live sequence uses are locked: match locked the whole "
                              "node where the prompt diverges instead of splitting it there";
        case Op::kLock:
            return "lock takes every node from the held one up to the root out of the evictable "
                   "blocks (and the eviction set) when its lock_ref goes from 0 to 1";
        case Op::kEvict:
            return "evict_one frees one block of an unlocked leaf, no more";
        case Op::kInsert:
            return "insert moves the sequence's lock to the node ending at its last block (lock "
                   "the new end, then unlock the node it held)";
        case Op::kFinish:
            return "release unlocks the held path: a node whose lock_ref drops to 0 is "
                   "evictable again (a lock_ref counted wrong on the way up)";
    }
    return "";
}

// evict_one freed the block of `gone`, which the model did not expect.
std::string why_wrong_victim(const Model& model, const Key& gone, const std::vector<Key>& victims) {
    const std::string freed = "evict_one freed block " +
                              std::to_string(model.cached.at(gone).block) + " (the prefix of " +
                              std::to_string(gone.size() / kBlock) + " blocks)";
    if (model.held(gone)) {
        return freed +
               ", which a live sequence holds: evicting a locked node (lock must take a "
               "node whose lock_ref goes from 0 to 1 out of the eviction set; "
               "evict_one takes only unlocked leaves)";
    }
    if (!model.ends_a_leaf(gone)) {
        return freed +
               ", which has cached blocks after it: an LRU that evicts the root path "
               "(only leaves are candidates, and a leaf loses its LAST block first)";
    }
    if (victims.empty()) return freed + ", but the model has nothing evictable";
    const Model::Prefix& oldest = model.cached.at(victims[0]);
    return freed + ", last used at step " + std::to_string(model.cached.at(gone).used) +
           ", but block " + std::to_string(oldest.block) + " was used least recently (step " +
           std::to_string(oldest.used) +
           "): evict_one takes the least recently used unlocked leaf, and a path a request "
           "matches, inserts or releases is touched as a whole (an LRU that touches only the "
           "returned leaf leaves the nodes above it looking older than they are)";
}

// One seed's run: the cache, its allocator and the model, and one method per operation.
class PropertyRun {
  public:
    explicit PropertyRun(uint64_t seed) : rng_(seed), allocator_(24), cache_(allocator_, kBlock) {}

    void step() {
        const int64_t op = below(10);
        std::vector<size_t> computing;  // matched, not yet inserted
        for (size_t i = 0; i < model_.live.size(); ++i) {
            if (!model_.live[i].inserted) computing.push_back(i);
        }
        if (op < 3 && model_.live.size() < 4) {
            admit(random_prompt());
        } else if (op < 5 && !computing.empty()) {
            insert(computing[size_t(below(int64_t(computing.size())))]);
        } else if (op < 7 && !model_.live.empty()) {
            finish(size_t(below(int64_t(model_.live.size()))));
        } else if (op < 8 && !model_.live.empty() && model_.live.size() < 4) {
            fork(model_.live[size_t(below(int64_t(model_.live.size())))]);
        } else {
            evict();
        }
    }

    void drain() {
        while (!model_.live.empty()) ASSERT_NO_FATAL_FAILURE(finish(0));
        while (cache_.evict_one()) {
        }
        EXPECT_EQ(allocator_.num_free(), allocator_.num_blocks()) << "every block back in the pool";
        EXPECT_EQ(cache_.nodes().size(), 1u) << "only the root is left";
    }

  private:
    int64_t below(int64_t n) { return int64_t(rng_() % uint64_t(n)); }

    // Three families of prompts, so they share prefixes and part at random blocks.
    std::vector<TokenId> random_prompt() {
        std::vector<TokenId> tokens;
        const int64_t length = 1 + below(6 * kBlock);
        const TokenId family = TokenId(below(3));
        for (int64_t i = 0; i < length; ++i) {
            // Mostly the family's own token sequence, sometimes a detour.
            tokens.push_back(below(8) == 0 ? TokenId(10 + below(3)) : TokenId(family * 100 + i));
        }
        return tokens;
    }

    // A request is admitted: match, then evict to make room for the rest and allocate it.
    void admit(const std::vector<TokenId>& prompt) {
        const int64_t full = int64_t(prompt.size()) / kBlock;
        const std::vector<BlockId> expected = model_.longest_match(prompt, full);
        ASSERT_EQ(cache_.cached_prefix_blocks(prompt), int64_t(expected.size()));
        // Enough blocks for the rest even if nothing more can be evicted?
        if (allocator_.num_free() + model_.evictable() < full + int64_t(expected.size())) return;
        const PrefixMatch hit = cache_.match(prompt, full);
        ASSERT_EQ(hit.blocks, expected) << "match returned " << show(hit.blocks)
                                        << ", but the longest cached prefix is " << show(expected);
        for (BlockId block : hit.blocks) allocator_.retain(block);
        model_.live.push_back({Sequence{prompt, hit.blocks, hit.node}, int64_t(expected.size())});
        model_.touch(prompt, int64_t(expected.size()));
        ASSERT_NO_FATAL_FAILURE(check(Op::kMatch));
        while (int64_t(model_.live.back().seq.blocks.size()) < full) {
            while (allocator_.num_free() == 0) ASSERT_NO_FATAL_FAILURE(evict());
            model_.live.back().seq.blocks.push_back(allocator_.allocate());
        }
    }

    // Its blocks computed, a sequence names them: the tree keeps its own block
    // of any prefix it has by now, and takes the sequence's for the rest.
    void insert(size_t index) {
        Live& live = model_.live[index];
        const std::vector<TokenId>& tokens = live.seq.tokens;
        const int64_t full = int64_t(live.seq.blocks.size());
        live.seq.node = cache_.insert(tokens, live.seq.blocks, live.seq.node);
        for (int64_t k = 1; k <= full; ++k) {
            model_.cached.try_emplace(prefix_of(tokens, k),
                                      Model::Prefix{live.seq.blocks[size_t(k - 1)], 0});
        }
        live.held_blocks = full;
        live.inserted = true;
        model_.touch(tokens, full);
        ASSERT_NO_FATAL_FAILURE(check(Op::kInsert));
    }

    void finish(size_t index) {
        Live& live = model_.live[index];
        model_.touch(live.seq.tokens, live.held_blocks);
        test::finish(cache_, allocator_, live.seq);
        model_.live.erase(model_.live.begin() + int64_t(index));
        ASSERT_NO_FATAL_FAILURE(check(Op::kFinish));
    }

    void fork(Live copy) {
        for (BlockId block : copy.seq.blocks) allocator_.retain(block);
        cache_.lock(copy.seq.node);
        model_.live.push_back(copy);
        ASSERT_NO_FATAL_FAILURE(check(Op::kLock));
    }

    void evict() {
        const std::vector<Key> victims = model_.next_victims();
        const bool evicted = cache_.evict_one();
        const std::map<Key, BlockId> tree = cached_prefixes(cache_);
        std::vector<Key> gone;
        for (const auto& [key, prefix] : model_.cached) {
            const auto kept = tree.find(key);
            if (kept == tree.end() || kept->second != prefix.block) gone.push_back(key);
        }
        if (!evicted) {
            ASSERT_TRUE(victims.empty())
                << "evict_one returned false, but block " << model_.cached.at(victims[0]).block
                << " is the last block of an unlocked leaf, free to evict";
        } else {
            ASSERT_EQ(gone.size(), 1u) << "evict_one changed " << gone.size()
                                       << " cached prefixes: it frees one block per call";
            ASSERT_TRUE(std::find(victims.begin(), victims.end(), gone[0]) != victims.end())
                << why_wrong_victim(model_, gone[0], victims);
            model_.cached.erase(gone[0]);
        }
        ASSERT_NO_FATAL_FAILURE(check(Op::kEvict));
    }

    // The tree against the model, after `op`.
    void check(Op op) {
        SCOPED_TRACE(std::string("after ") + op_name(op));
        ASSERT_NO_THROW(cache_.check_invariants());
        const std::map<Key, BlockId> tree = cached_prefixes(cache_);
        for (const auto& [key, prefix] : model_.cached) {
            const auto found = tree.find(key);
            ASSERT_TRUE(found != tree.end() && found->second == prefix.block)
                << "the prefix of " << key.size() / kBlock << " blocks, named block "
                << prefix.block << ", is "
                << (found == tree.end() ? "no longer cached"
                                        : "cached under block " + std::to_string(found->second));
        }
        for (const auto& [key, block] : tree) {
            ASSERT_EQ(model_.cached.count(key), 1u)
                << "the tree caches a prefix of " << key.size() / kBlock << " blocks under block "
                << block << ", which no sequence named (or which was evicted)";
        }
        ASSERT_EQ(cache_.num_cached_blocks(), int64_t(model_.cached.size()));
        const int64_t evictable = model_.evictable();
        ASSERT_EQ(cache_.num_evictable(), evictable)
            << "num_evictable() is " << cache_.num_evictable() << ", but " << evictable
            << " cached blocks are on no live sequence's path: "
            << why_evictable_differs(op, cache_.num_evictable() > evictable);
        check_reference_counts();
    }

    // Every block's reference count equals its owners: the cache (if cached)
    // and each live sequence whose table holds it.
    void check_reference_counts() {
        for (BlockId block = 0; block < BlockId(allocator_.num_blocks()); ++block) {
            int64_t owners = cache_.contains(block) ? 1 : 0;
            for (const Live& live : model_.live) {
                owners += std::count(live.seq.blocks.begin(), live.seq.blocks.end(), block);
            }
            ASSERT_EQ(allocator_.ref_count(block), owners)
                << "block " << block << ": its references are the cache's (if cached) and one "
                << "per live sequence whose table holds it";
        }
    }

    std::mt19937_64 rng_;
    BlockAllocator allocator_;
    RadixCache cache_;
    Model model_;
};

TEST(RadixCacheProperty, RandomOperationsAgreeWithABruteForceModel) {
    for (uint64_t seed = 1; seed <= 40; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        PropertyRun run(seed);
        for (int step = 0; step < 300; ++step) ASSERT_NO_FATAL_FAILURE(run.step());
        ASSERT_NO_FATAL_FAILURE(run.drain());
    }
}

}  // namespace
}  // namespace servelab
