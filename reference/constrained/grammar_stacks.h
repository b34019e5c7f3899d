// grammar_stacks.h — the pushdown matcher's state (a set of stacks) and its
// one step: taking a byte.
//
// Lab 12 (chapter 11.6, constrained decoding). A stack lists grammar
// positions (element indices, grammar.h), bottom first. Its top is always a
// kBytes element, the next byte to match; the entries below are the
// positions to return to when the rules above them end. The empty stack
// means the input so far is a whole sentence.
//
// Taking a byte (StackStepper::advance): every stack whose top byte set
// holds the byte moves its top one element on, then is expanded until its
// top is a kBytes element again:
//   - a kEnd top: the rule is done; pop it, returning to the position below;
//   - a kRule top: pop it, push the position after it (where to return), then
//     one stack per alternative of the rule, with its first element pushed.
//     When the position after it is the end of the caller's alternative, the
//     return is not pushed (a tail call: returning there would pop at once),
//     so a right-recursive repetition (items ::= item items | "") keeps a
//     stack of constant depth however many items it matches.
// Equal stacks are kept once: an ambiguous grammar's parses that reach the
// same position merge, so the set stays as small as the grammar allows.
//
// Bounded work: more than kMaxStacks stacks at once, or a byte whose
// expansions take more than kMaxExpansionSteps steps, throws GrammarError (a
// grammar so ambiguous that one byte opens thousands of parses).
//
// A negative entry is a marker for "the unknown stack below a rule"
// (below_marker), used only by the mask cache's builder
// (mask_cache_builder.h): a stack with a marker on top takes no byte, like
// the empty stack, unless the stepper is told what may follow each rule
// (continue_past_markers): then it stands for those stacks.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "reference/constrained/grammar.h"

namespace servelab {

inline constexpr size_t kMaxStacks = 4096;
// matching_stacks()'s answer when it has none.
inline constexpr uint64_t kUnknownMatch = ~uint64_t(0);
inline constexpr int64_t kMaxExpansionSteps = int64_t(1) << 20;

// The marker standing for whatever lies below a frame of `rule`, and back.
inline int32_t below_marker(int32_t rule) {
    return -1 - rule;
}
inline int32_t marker_rule(int32_t marker) {
    return -1 - marker;
}

// A set of stacks, stored one after another in one array so that copying
// and clearing reuse memory (the mask walk builds one per trie node). A
// hash index finds equal stacks; clearing leaves it allocated.
class StackSet {
  public:
    size_t size() const { return ends_.size(); }
    bool empty() const { return ends_.empty(); }
    std::span<const int32_t> operator[](size_t i) const {
        const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
        return {elements_.data() + begin, ends_[i] - begin};
    }
    void clear();
    // Adds `stack` unless the set holds an equal one.
    void add(std::span<const int32_t> stack);
    // Some stack is empty: the input so far is a whole sentence.
    bool has_complete() const;
    // Some stack has a grammar element on top: a byte may follow.
    bool has_live() const;
    // The same stacks, in any order.
    bool same_stacks(const StackSet& other) const;

  private:
    // A slot of the hash index: which stack, valid only in its generation.
    struct Slot {
        uint32_t generation = 0;
        uint32_t stack = 0;
    };
    bool find(std::span<const int32_t> stack, uint64_t hash) const;
    void grow_index();
    void put_in_index(size_t i);

    std::vector<int32_t> elements_;  // the stacks, bottom first, one after another
    std::vector<uint32_t> ends_;     // ends_[i]: one past stack i in elements_
    std::vector<uint64_t> hashes_;   // hashes_[i]: of stack i
    std::vector<Slot> slots_;        // open addressing over hashes_; a power of two long
    uint32_t generation_ = 1;        // slots of older generations are free
};

// Expands and advances stacks over one grammar. Holds scratch space, so one
// stepper serves one thread.
class StackStepper {
  public:
    explicit StackStepper(const Grammar& grammar) : grammar_(&grammar) {}

    const Grammar& grammar() const { return *grammar_; }
    // The stacks at the start: the root rule's alternatives, expanded.
    StackSet initial_stacks();
    // Adds to `out` the expansions of `stack` (whose top may be any element,
    // a kEnd or a kRule included, or none: the empty stack is complete).
    void expand(std::span<const int32_t> stack, StackSet& out);
    // out = the stacks of `in` that take `byte`, advanced and expanded.
    void advance(const StackSet& in, uint8_t byte, StackSet& out);
    // out = `in` after all of `bytes`; false (out then empty) when no stack
    // takes them.
    bool advance_bytes(const StackSet& in, std::string_view bytes, StackSet& out);
    // Which stacks of `in` take `byte`, one bit each: advance() gives equal
    // results for two bytes with equal answers (the mask walk reuses one).
    // kUnknownMatch past 63 stacks, or when a marker is to be continued.
    uint64_t matching_stacks(const StackSet& in, uint8_t byte) const;

    // What follows a frame of a rule, in any context (stacks with grammar
    // elements on top); null: nothing (a marker then takes no byte).
    using Continuations = std::function<const StackSet&(int32_t rule)>;
    // Some stack of `stacks` may take a byte (a marker's only when continued).
    bool can_take_bytes(const StackSet& stacks) const;
    // From now on a stack with a marker for rule R on top stands for
    // after(R): advance() advances those instead.
    void continue_past_markers(Continuations after) { continuations_ = std::move(after); }

  private:
    void advance_stack(std::span<const int32_t> stack, uint8_t byte, StackSet& out);
    void expand_work(StackSet& out, int32_t depth);
    void expand_rule(int32_t position, int32_t rule, StackSet& out, int32_t depth);
    void add_expanded(StackSet& out);

    const Grammar* grammar_;
    std::vector<int32_t> work_;  // the stack being expanded
    int64_t steps_left_ = 0;
    StackSet spare_;  // advance_bytes' other buffer
    Continuations continuations_;
};

}  // namespace servelab
