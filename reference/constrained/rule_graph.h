// rule_graph.h — two questions asked of a grammar's rules before a matcher
// may run them: which rules can match "", and which can begin with
// themselves (left recursion).
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
// Both the grammar builder (grammar.h, which refuses left recursion naming
// the cycle) and the GBNF parser (gbnf_parser.h, which reports it at the
// reference in the source that closes the cycle) ask them, each of its own
// rule representation: both hand over the rules' shapes, and the answers
// are computed here, once.
//   - A rule is nullable when one of its alternatives is all nullable rules
//     (a byte set never matches ""): the least fixed point.
//   - Rule A may begin with rule B when an alternative of A references B
//     after nothing but nullable rules. A cycle of these edges is left
//     recursion: a pushdown matcher would expand A forever without reading
//     a byte.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace servelab {

// In a RuleShapes symbol list: a byte set (every other value is a rule id).
inline constexpr int32_t kByteSetSymbol = -1;

// [rule][alternative][symbol]: the rule each symbol references, or
// kByteSetSymbol.
using RuleShapes = std::vector<std::vector<std::vector<int32_t>>>;

// Which rules can match "". Linear time (a worklist), even on a long chain.
std::vector<bool> nullable_rules(const RuleShapes& rules);

// Where a rule reference sits: rules[rule][alternative][symbol].
struct RuleReference {
    int32_t rule = -1;
    int32_t alternative = -1;
    int32_t symbol = -1;
};

struct LeftRecursion {
    // The rules around the cycle, from the one that begins with itself to
    // the last before the cycle closes.
    std::vector<int32_t> cycle;
    // The reference that closes it (to cycle.front()).
    RuleReference closing;
};

// The first left-recursive cycle a depth-first search meets, or nullopt.
// The search keeps its own stack: a long chain of rules must not exhaust
// the call stack.
std::optional<LeftRecursion> find_left_recursion(const RuleShapes& rules,
                                                 const std::vector<bool>& nullable);

}  // namespace servelab
