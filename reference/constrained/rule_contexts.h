// rule_contexts.h — what can lie below a rule on a matcher stack: the
// context the mask cache may take for granted at a grammar position.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise. The
// stack below a frame of rule R (grammar_stacks.h) starts with a return
// position: the element after some reference to R, or, when that reference
// ends its alternative (a tail call, which pushes no return), whatever lay
// below the caller's frame. The root's frame may also have nothing below.
// below(R) lists these for every reference in the grammar, so it holds
// the top of every stack that can ever lie below R (and maybe more).
//
// When below(R) is one position c, every stack holding a frame of R has c
// right under it: the context of a position in R reaches down through c,
// and through below(rule of c) in turn while that is one position too. In a
// JSON grammar the string's characters are such a position: their rule is
// only called from the string's rule, so their context reaches the closing
// quote, and only tokens that run past the closing quote depend on what
// lies below. context_stack() gives that known part; continuations() the
// stacks that may follow when it ends, over all the places it is used.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "reference/constrained/grammar.h"
#include "reference/constrained/grammar_stacks.h"

namespace servelab {

// In below(): the stack may end there (below the root's frame).
inline constexpr int32_t kNothingBelow = -1;

class RuleContexts {
  public:
    explicit RuleContexts(const Grammar& grammar);

    // Whether a stack can ever hold a frame of `rule` (the root calls it,
    // directly or not).
    bool reachable(int32_t rule) const { return reachable_[size_t(rule)]; }
    // The rule whose alternative holds `element`.
    int32_t rule_of(int32_t element) const { return rule_of_element_[size_t(element)]; }
    // The return positions that can lie right under a frame of `rule`,
    // ascending (kNothingBelow first when the stack may end there).
    const std::vector<int32_t>& below(int32_t rule) const { return below_[size_t(rule)]; }
    // [below_marker(R), c_k, ..., c_1, element]: the entries every stack
    // with `element` on top ends with (c_1 = the only member of
    // below(rule_of(element)), c_2 of below(rule_of(c_1)), ...), over a
    // marker for what may lie under the last known rule R.
    std::vector<int32_t> context_stack(int32_t element) const;
    // The stacks with a grammar element on top that can follow when a frame
    // of `rule` ends, in any context, with markers at the bottom: an over-
    // approximation (also what follows in contexts that never arise).
    // Empty when nothing can follow (only the end of the output).
    const StackSet& continuations(int32_t rule);

  private:
    StackSet collect_continuations(int32_t rule);

    StackStepper stepper_;
    std::vector<int32_t> rule_of_element_;
    std::vector<bool> reachable_;
    std::vector<std::vector<int32_t>> below_;
    std::vector<std::optional<StackSet>> continuations_;  // by rule, computed on first use
};

}  // namespace servelab
