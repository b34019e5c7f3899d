// cached_mask.cpp — see cached_mask.h.
#include "reference/constrained/cached_mask.h"

#include <algorithm>
#include <string_view>

namespace servelab {
namespace {

size_t common_prefix_length(std::string_view a, std::string_view b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

// The entry for `stack` (non-empty): its top's, or the refined entry for
// the stack entry under that context when there is one.
const PositionMasks& entry_for(const CompiledGrammar& compiled, std::span<const int32_t> stack) {
    const PositionMasks& base = compiled.position_masks(stack.back());
    if (base.refined.empty() || stack.size() <= size_t(base.context_depth)) return base;
    const int32_t below = stack[stack.size() - 1 - size_t(base.context_depth)];
    const auto it = std::lower_bound(base.refined.begin(), base.refined.end(), below,
                                     [](const PositionMasks& entry, int32_t entry_below) {
                                         return entry.entry_below < entry_below;
                                     });
    return it != base.refined.end() && it->entry_below == below ? *it : base;
}

// Adds to `mask` the dependent tokens of `masks` that the stack under the
// context of `stack` takes. Sorted by their bytes past the exit, each check
// starts from the stack sets its predecessor left for their common prefix.
void add_dependent_tokens(const TokenVocabulary& vocabulary, std::span<const int32_t> stack,
                          const PositionMasks& masks, TokenBitmask& mask, MaskScratch& scratch) {
    if (stack.size() < size_t(masks.context_depth)) {
        throw Error("mask cache: a stack is shallower than its top's context (a builder bug)");
    }
    std::vector<StackSet>& levels = scratch.levels;
    if (levels.empty()) levels.resize(1);
    levels[0].clear();
    scratch.stepper.expand(stack.first(stack.size() - size_t(masks.context_depth)), levels[0]);
    std::string_view done;  // levels[j] holds the stacks after done[0, j), j <= valid
    size_t valid = 0;
    for (const DependentToken& d : masks.dependent) {
        if (mask.test(d.token)) continue;
        const std::string_view rest =
            std::string_view(vocabulary.token_bytes[size_t(d.token)]).substr(size_t(d.exit_bytes));
        size_t j = std::min(common_prefix_length(done, rest), valid);
        for (; j < rest.size() && !levels[j].empty(); ++j) {
            if (levels.size() <= j + 1) levels.resize(j + 2);
            scratch.stepper.advance(levels[j], uint8_t(rest[j]), levels[j + 1]);
        }
        done = rest;
        valid = j;
        if (j == rest.size() && !levels[j].empty()) mask.set(d.token);
    }
}

}  // namespace

void fill_mask_from_cache(const CompiledGrammar& compiled, const StackSet& stacks,
                          TokenBitmask& mask, MaskScratch& scratch) {
    mask.clear();
    // Each distinct entry's accepted set once (many stacks may share a top).
    std::vector<const PositionMasks*>& entries = scratch.entries;
    entries.clear();
    for (size_t i = 0; i < stacks.size(); ++i) {
        if (!stacks[i].empty()) entries.push_back(&entry_for(compiled, stacks[i]));
    }
    std::vector<const PositionMasks*>& distinct = scratch.distinct_entries;
    distinct = entries;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    for (const PositionMasks* entry : distinct) mask.merge(entry->accepted);
    for (size_t i = 0, e = 0; i < stacks.size(); ++i) {
        if (stacks[i].empty()) continue;
        const PositionMasks& entry = *entries[e++];
        if (!entry.dependent.empty()) {
            add_dependent_tokens(compiled.vocabulary(), stacks[i], entry, mask, scratch);
        }
    }
}

}  // namespace servelab
