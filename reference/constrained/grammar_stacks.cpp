// grammar_stacks.cpp — see grammar_stacks.h.
#include "reference/constrained/grammar_stacks.h"

#include <fmt/format.h>

#include <algorithm>

namespace servelab {
namespace {

// The hash index's first size (a power of two; it doubles as needed).
constexpr size_t kInitialSlots = 32;

// The deepest chain of rules an expansion may enter without matching a byte.
constexpr int32_t kMaxExpansionDepth = 4096;

uint64_t hash_stack(std::span<const int32_t> stack) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the entries
    for (const int32_t entry : stack) h = (h ^ uint32_t(entry)) * 0x100000001b3ULL;
    return h;
}

}  // namespace

// ---------------------------------------------------------------- StackSet

void StackSet::clear() {
    elements_.clear();
    ends_.clear();
    hashes_.clear();
    if (++generation_ == 0) {  // wrapped around: old stamps could look current
        std::fill(slots_.begin(), slots_.end(), Slot{});
        generation_ = 1;
    }
}

void StackSet::add(std::span<const int32_t> stack) {
    const uint64_t hash = hash_stack(stack);
    if (find(stack, hash)) return;
    elements_.insert(elements_.end(), stack.begin(), stack.end());
    ends_.push_back(uint32_t(elements_.size()));
    hashes_.push_back(hash);
    if (2 * size() > slots_.size()) {
        grow_index();  // at most half full, so that probes stay short
    } else {
        put_in_index(size() - 1);
    }
}

bool StackSet::find(std::span<const int32_t> stack, uint64_t hash) const {
    const size_t mask = slots_.size() - 1;
    for (size_t slot = hash & mask; !slots_.empty() && slots_[slot].generation == generation_;
         slot = (slot + 1) & mask) {
        const size_t i = slots_[slot].stack;
        const auto other = (*this)[i];
        if (hashes_[i] == hash &&
            std::equal(other.begin(), other.end(), stack.begin(), stack.end())) {
            return true;
        }
    }
    return false;
}

// Doubles the index and puts every stack back in it.
void StackSet::grow_index() {
    slots_.assign(std::max<size_t>(kInitialSlots, 2 * slots_.size()), Slot{});
    generation_ = 1;
    for (size_t i = 0; i < size(); ++i) put_in_index(i);
}

void StackSet::put_in_index(size_t i) {
    const size_t mask = slots_.size() - 1;
    size_t slot = hashes_[i] & mask;
    while (slots_[slot].generation == generation_) slot = (slot + 1) & mask;
    slots_[slot] = {generation_, uint32_t(i)};
}

bool StackSet::has_complete() const {
    for (size_t i = 0; i < size(); ++i) {
        if ((*this)[i].empty()) return true;
    }
    return false;
}

bool StackSet::has_live() const {
    for (size_t i = 0; i < size(); ++i) {
        const auto stack = (*this)[i];
        if (!stack.empty() && stack.back() >= 0) return true;
    }
    return false;
}

bool StackSet::same_stacks(const StackSet& other) const {
    if (size() != other.size()) return false;
    for (size_t i = 0; i < other.size(); ++i) {
        if (!find(other[i], hash_stack(other[i]))) return false;
    }
    return true;
}

// ---------------------------------------------------------------- StackStepper

StackSet StackStepper::initial_stacks() {
    StackSet stacks;
    steps_left_ = kMaxExpansionSteps;
    for (const int32_t first : grammar_->alternatives(grammar_->root_rule())) {
        work_.assign(1, first);
        expand_work(stacks, 0);
    }
    return stacks;
}

void StackStepper::expand(std::span<const int32_t> stack, StackSet& out) {
    steps_left_ = kMaxExpansionSteps;
    work_.assign(stack.begin(), stack.end());
    expand_work(out, 0);
}

void StackStepper::advance(const StackSet& in, uint8_t byte, StackSet& out) {
    out.clear();
    steps_left_ = kMaxExpansionSteps;
    for (size_t i = 0; i < in.size(); ++i) {
        const auto stack = in[i];
        if (stack.empty()) continue;  // complete: no byte may follow
        if (stack.back() >= 0) {
            advance_stack(stack, byte, out);
        } else if (continuations_) {
            const StackSet& after = continuations_(marker_rule(stack.back()));
            for (size_t j = 0; j < after.size(); ++j) advance_stack(after[j], byte, out);
        }
    }
}

// Adds to `out` what `stack` (a grammar element on top) becomes after `byte`.
void StackStepper::advance_stack(std::span<const int32_t> stack, uint8_t byte, StackSet& out) {
    const GrammarElement& top = grammar_->element(stack.back());
    if (!grammar_->byte_set(top.index).contains(byte)) return;
    work_.assign(stack.begin(), stack.end());
    work_.back() += 1;  // the next element of the same alternative
    expand_work(out, 0);
}

bool StackStepper::can_take_bytes(const StackSet& stacks) const {
    for (size_t i = 0; i < stacks.size(); ++i) {
        const auto stack = stacks[i];
        if (!stack.empty() && (stack.back() >= 0 || continuations_)) return true;
    }
    return false;
}

uint64_t StackStepper::matching_stacks(const StackSet& in, uint8_t byte) const {
    if (in.size() > 63) return kUnknownMatch;
    uint64_t matching = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        const auto stack = in[i];
        if (stack.empty()) continue;
        if (stack.back() < 0) {
            if (continuations_) return kUnknownMatch;
            continue;
        }
        const GrammarElement& top = grammar_->element(stack.back());
        if (grammar_->byte_set(top.index).contains(byte)) matching |= uint64_t(1) << i;
    }
    return matching;
}

bool StackStepper::advance_bytes(const StackSet& in, std::string_view bytes, StackSet& out) {
    if (bytes.empty()) {
        out = in;
        return !out.empty();
    }
    // Alternate between out and spare_ so that the last byte writes to out.
    const StackSet* from = &in;
    for (size_t i = 0; i < bytes.size(); ++i) {
        StackSet& to = (bytes.size() - 1 - i) % 2 == 0 ? out : spare_;
        advance(*from, uint8_t(bytes[i]), to);
        if (to.empty()) {
            out.clear();
            return false;
        }
        from = &to;
    }
    return true;
}

// Expands work_ (leaving it as it found it) into out; `depth` counts the
// rules entered on the way, to refuse a chain too long for the call stack.
void StackStepper::expand_work(StackSet& out, int32_t depth) {
    if (--steps_left_ < 0) {
        throw GrammarError(
            fmt::format("the grammar is too ambiguous: one byte took over {} expansion steps",
                        kMaxExpansionSteps));
    }
    if (depth > kMaxExpansionDepth) {
        throw GrammarError(fmt::format(
            "the grammar nests rules over {} deep before matching a byte", kMaxExpansionDepth));
    }
    if (work_.empty() || work_.back() < 0) return add_expanded(out);
    const int32_t top = work_.back();
    const GrammarElement& element = grammar_->element(top);
    if (element.kind == GrammarElement::Kind::kBytes) return add_expanded(out);
    work_.pop_back();
    if (element.kind == GrammarElement::Kind::kEnd) {
        expand_work(out, depth);  // the rule is done: on with the position below
    } else {
        expand_rule(top, element.index, out, depth);
    }
    work_.push_back(top);
}

// work_ without the kRule element `position` (calling `rule`): push where to
// return, then each alternative's first element in turn.
void StackStepper::expand_rule(int32_t position, int32_t rule, StackSet& out, int32_t depth) {
    const bool returns = grammar_->element(position + 1).kind != GrammarElement::Kind::kEnd;
    if (returns) work_.push_back(position + 1);  // not for a tail call
    bool expanded_empty = false;
    for (const int32_t first : grammar_->alternatives(rule)) {
        // Two empty alternatives expand alike: repeated through stacked
        // frames of the rule they would double the work at each frame.
        const bool empty = grammar_->element(first).kind == GrammarElement::Kind::kEnd;
        if (empty && expanded_empty) continue;
        expanded_empty = expanded_empty || empty;
        work_.push_back(first);
        expand_work(out, depth + 1);
        work_.pop_back();
    }
    if (returns) work_.pop_back();
}

void StackStepper::add_expanded(StackSet& out) {
    out.add(work_);
    if (out.size() > kMaxStacks) {
        throw GrammarError(fmt::format(
            "the grammar is too ambiguous: over {} parses are open at once", kMaxStacks));
    }
}

}  // namespace servelab
