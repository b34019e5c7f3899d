// rule_contexts.cpp — see rule_contexts.h.
#include "reference/constrained/rule_contexts.h"

#include <algorithm>
#include <set>

namespace servelab {
namespace {

// How many known frames a context may reach down through: deep enough for
// the nested helper rules of a JSON string or number.
constexpr size_t kMaxContextDepth = 32;

std::vector<int32_t> rules_of_elements(const Grammar& grammar) {
    std::vector<int32_t> rules(grammar.num_elements(), -1);
    size_t begin = 0;
    for (size_t i = 0; i < grammar.num_elements(); ++i) {
        if (grammar.element(int32_t(i)).kind != GrammarElement::Kind::kEnd) continue;
        std::fill(rules.begin() + ptrdiff_t(begin), rules.begin() + ptrdiff_t(i + 1),
                  grammar.element(int32_t(i)).index);
        begin = i + 1;
    }
    return rules;
}

// The rules the root calls, directly or through others.
std::vector<bool> rules_reachable(const Grammar& grammar) {
    std::vector<bool> reachable(grammar.num_rules(), false);
    std::vector<int32_t> pending = {grammar.root_rule()};
    reachable[size_t(grammar.root_rule())] = true;
    while (!pending.empty()) {
        const int32_t rule = pending.back();
        pending.pop_back();
        for (const int32_t first : grammar.alternatives(rule)) {
            for (int32_t e = first; grammar.element(e).kind != GrammarElement::Kind::kEnd; ++e) {
                const GrammarElement& element = grammar.element(e);
                if (element.kind != GrammarElement::Kind::kRule) continue;
                if (reachable[size_t(element.index)]) continue;
                reachable[size_t(element.index)] = true;
                pending.push_back(element.index);
            }
        }
    }
    return reachable;
}

// below(R) for every rule: the return positions of R's references, and,
// through tail calls, below(caller): a least fixed point, by a worklist of
// the rules whose set grew (linear in the sets' growth, even on a chain of
// thousands of rules).
std::vector<std::vector<int32_t>> rule_belows(const Grammar& grammar,
                                              const std::vector<int32_t>& rule_of) {
    std::vector<std::set<int32_t>> below(grammar.num_rules());
    std::vector<std::vector<int32_t>> tail_callees(grammar.num_rules());
    below[size_t(grammar.root_rule())].insert(kNothingBelow);
    for (int32_t p = 0; p < int32_t(grammar.num_elements()); ++p) {
        const GrammarElement& e = grammar.element(p);
        if (e.kind != GrammarElement::Kind::kRule) continue;
        if (grammar.element(p + 1).kind == GrammarElement::Kind::kEnd) {
            tail_callees[size_t(rule_of[size_t(p)])].push_back(e.index);
        } else {
            below[size_t(e.index)].insert(p + 1);
        }
    }
    std::vector<int32_t> grown(grammar.num_rules());
    for (size_t r = 0; r < grown.size(); ++r) grown[r] = int32_t(r);
    while (!grown.empty()) {
        const int32_t caller = grown.back();
        grown.pop_back();
        for (const int32_t callee : tail_callees[size_t(caller)]) {
            bool changed = false;
            for (const int32_t position : below[size_t(caller)]) {
                changed = below[size_t(callee)].insert(position).second || changed;
            }
            if (changed) grown.push_back(callee);
        }
    }
    std::vector<std::vector<int32_t>> out(below.size());
    for (size_t r = 0; r < below.size(); ++r) out[r].assign(below[r].begin(), below[r].end());
    return out;
}

}  // namespace

RuleContexts::RuleContexts(const Grammar& grammar)
    : stepper_(grammar),
      rule_of_element_(rules_of_elements(grammar)),
      reachable_(rules_reachable(grammar)),
      below_(rule_belows(grammar, rule_of_element_)),
      continuations_(grammar.num_rules()) {}

std::vector<int32_t> RuleContexts::context_stack(int32_t element) const {
    std::vector<int32_t> known = {element};  // top first
    std::vector<int32_t> rules = {rule_of(element)};
    while (known.size() < kMaxContextDepth) {
        const std::vector<int32_t>& under = below(rules.back());
        if (under.size() != 1 || under[0] == kNothingBelow) break;
        // A rule met again: only rules the root never reaches call only
        // each other; their stacks never arise, so stop there.
        const int32_t next_rule = rule_of(under[0]);
        if (std::find(rules.begin(), rules.end(), next_rule) != rules.end()) break;
        known.push_back(under[0]);
        rules.push_back(next_rule);
    }
    const int32_t rule = rules.back();
    known.push_back(below_marker(rule));
    std::reverse(known.begin(), known.end());
    return known;
}

const StackSet& RuleContexts::continuations(int32_t rule) {
    std::optional<StackSet>& memo = continuations_[size_t(rule)];
    if (!memo) memo = collect_continuations(rule);
    return *memo;
}

// From each return position under `rule`, the expanded stacks over a
// marker for its own rule; where that rule can end without a byte (the
// stack is down to the marker), what follows it is gathered too.
StackSet RuleContexts::collect_continuations(int32_t rule) {
    StackSet live;
    StackSet expanded;
    std::vector<bool> seen(below_.size(), false);
    std::vector<int32_t> pending = {rule};
    seen[size_t(rule)] = true;
    while (!pending.empty()) {
        const int32_t ended = pending.back();
        pending.pop_back();
        for (const int32_t position : below(ended)) {
            if (position == kNothingBelow) continue;  // the output ends: no byte follows
            const int32_t stack[] = {below_marker(rule_of(position)), position};
            expanded.clear();
            stepper_.expand(stack, expanded);
            for (size_t i = 0; i < expanded.size(); ++i) {
                const auto s = expanded[i];
                if (s.back() >= 0) {
                    live.add(s);
                } else if (!seen[size_t(marker_rule(s.back()))]) {
                    seen[size_t(marker_rule(s.back()))] = true;
                    pending.push_back(marker_rule(s.back()));
                }
            }
        }
    }
    return live;
}

}  // namespace servelab
