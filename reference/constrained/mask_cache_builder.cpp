// mask_cache_builder.cpp — see mask_cache_builder.h.
#include "reference/constrained/mask_cache_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

namespace servelab {
namespace {

// Step 3 is worth its walks when at least this many tokens are dependent,
// and affordable when the context's bottom rule has at most this many call
// sites.
constexpr size_t kRefineFromDependents = 64;
constexpr size_t kMaxRefinedCallSites = 16;

// The clock is read once per this many trie nodes.
constexpr int64_t kNodesPerClockCheck = 4096;

bool has_marker_on_top(const StackSet& stacks) {
    for (size_t i = 0; i < stacks.size(); ++i) {
        const auto stack = stacks[i];
        if (!stack.empty() && stack.back() < 0) return true;
    }
    return false;
}

std::string_view bytes_after_exit(const TokenVocabulary& vocabulary, const DependentToken& d) {
    return std::string_view(vocabulary.token_bytes[size_t(d.token)]).substr(size_t(d.exit_bytes));
}

std::vector<int32_t> nodes_of_tokens(const TokenTrie& trie, int32_t vocab_size) {
    std::vector<int32_t> node_of(size_t(vocab_size), -1);
    for (size_t n = 0; n < trie.nodes().size(); ++n) {
        for (const TokenId t : trie.nodes()[n].tokens) node_of[size_t(t)] = int32_t(n);
    }
    return node_of;
}

}  // namespace

void CompileDeadline::check() const {
    if (std::chrono::steady_clock::now() - start > limit) {
        throw GrammarError(fmt::format(
            "the constraint is too complex: compiling it took over {} ms", limit.count()));
    }
}

MaskCacheBuilder::MaskCacheBuilder(const Grammar& grammar, const TokenTrie& trie,
                                   const TokenVocabulary& vocabulary, CompileDeadline deadline)
    : trie_(trie),
      vocabulary_(vocabulary),
      deadline_(deadline),
      contexts_(grammar),
      scratch_(grammar),
      node_of_token_(nodes_of_tokens(trie, vocabulary.size())) {}

PositionMasks MaskCacheBuilder::build(int32_t element) {
    if (!contexts_.reachable(contexts_.rule_of(element))) {
        PositionMasks none;
        none.accepted = TokenBitmask(vocabulary_.size());
        return none;
    }
    const std::vector<int32_t> context = contexts_.context_stack(element);
    PositionMasks masks = build_for_context(context, nullptr);
    refine(masks, context);
    return masks;
}

// Steps 1 and 2 for the stacks that end with `context` (bar its marker).
PositionMasks MaskCacheBuilder::build_for_context(const std::vector<int32_t>& context,
                                                  const NodeFilter* only) {
    PositionMasks masks;
    masks.accepted = TokenBitmask(vocabulary_.size());
    masks.context_depth = int32_t(context.size()) - 1;  // the marker is not a stack entry
    const std::vector<int32_t> exits = walk_known_context(context, masks.accepted, only);
    const StackSet& continuations = contexts_.continuations(marker_rule(context[0]));
    if (continuations.empty()) return masks;  // only the end of the output lies below
    scratch_.stepper.continue_past_markers(
        [this](int32_t rule) -> const StackSet& { return contexts_.continuations(rule); });
    for (const int32_t exit : exits) walk_past_exit(exit, continuations, masks, only);
    scratch_.stepper.continue_past_markers(nullptr);
    std::sort(masks.dependent.begin(), masks.dependent.end(),
              [&](const DependentToken& a, const DependentToken& b) {
                  return bytes_after_exit(vocabulary_, a) < bytes_after_exit(vocabulary_, b);
              });
    return masks;
}

// Step 1: marks in `accepted` the tokens a path takes within the known
// context; returns the exit nodes.
std::vector<int32_t> MaskCacheBuilder::walk_known_context(const std::vector<int32_t>& context,
                                                          TokenBitmask& accepted,
                                                          const NodeFilter* only) {
    StackSet start;
    start.add(context);
    std::vector<int32_t> exits;
    walk_token_trie(trie_, 0, start, scratch_, [&](int32_t node, const StackSet& stacks) {
        const TokenTrie::Node& here = trie_.nodes()[size_t(node)];
        for (const TokenId t : here.tokens) accepted.set(t);
        if (here.subtree_size > 1 && has_marker_on_top(stacks)) exits.push_back(node);
        return worth_walking_below(node, only);
    });
    return exits;
}

// Step 2, for one exit node: the tokens below it that some context could
// take past the exit, and that step 1 did not accept. (The stepper takes a
// stack down to a marker for what may follow the marker's rule.)
void MaskCacheBuilder::walk_past_exit(int32_t exit, const StackSet& continuations,
                                      PositionMasks& masks, const NodeFilter* only) {
    const int32_t exit_bytes = trie_.nodes()[size_t(exit)].depth;
    walk_token_trie(trie_, exit, continuations, scratch_, [&](int32_t node, const StackSet&) {
        for (const TokenId t : trie_.nodes()[size_t(node)].tokens) {
            if (!masks.accepted.test(t)) masks.dependent.push_back({t, exit_bytes});
        }
        return worth_walking_below(node, only);
    });
}

// Step 3: an entry per call site of the context's bottom rule, each walked
// only towards the tokens `base` leaves dependent.
void MaskCacheBuilder::refine(PositionMasks& base, const std::vector<int32_t>& context) {
    if (base.dependent.size() < kRefineFromDependents) return;
    std::vector<int32_t> call_sites = contexts_.below(marker_rule(context[0]));
    std::erase_if(call_sites, [&](int32_t site) {  // stacks with none below keep the base entry
        return site == kNothingBelow || !contexts_.reachable(contexts_.rule_of(site));
    });
    if (call_sites.size() > kMaxRefinedCallSites) return;
    NodeFilter dependent_nodes;
    TokenBitmask was_dependent(vocabulary_.size());
    for (const DependentToken& d : base.dependent) {
        dependent_nodes.push_back(node_of_token_[size_t(d.token)]);
        was_dependent.set(d.token);
    }
    std::sort(dependent_nodes.begin(), dependent_nodes.end());
    for (const int32_t site : call_sites) {
        std::vector<int32_t> longer = contexts_.context_stack(site);
        longer.insert(longer.end(), context.begin() + 1, context.end());
        PositionMasks refined = build_for_context(longer, &dependent_nodes);
        refined.accepted.merge(base.accepted);
        std::erase_if(refined.dependent,
                      [&](const DependentToken& d) { return !was_dependent.test(d.token); });
        refined.entry_below = site;
        base.refined.push_back(std::move(refined));
    }
}

// Below `node` lies a token of `only` (or there is no filter); also where
// the clock is read.
bool MaskCacheBuilder::worth_walking_below(int32_t node, const NodeFilter* only) {
    if (++nodes_visited_ % kNodesPerClockCheck == 0) deadline_.check();
    if (only == nullptr) return true;
    const int32_t end = node + trie_.nodes()[size_t(node)].subtree_size;
    const auto it = std::upper_bound(only->begin(), only->end(), node);
    return it != only->end() && *it < end;
}

}  // namespace servelab
