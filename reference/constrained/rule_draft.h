// rule_draft.h — grammar rules as a front end writes them, before they go into a GrammarBuilder.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
// The GBNF parser and the regex parser write their rules here first, for
// three reasons a GrammarBuilder cannot serve: every symbol remembers where
// in the source it was written (so a left-recursive reference or an
// undefined rule is reported at its line and column); the rules can be read
// back (the regex parser rewrites a repeated item that can match "", and
// the GBNF parser checks the whole grammar before building it); and helper
// rules get their final names only at the end, after every name the source
// uses is taken, so a helper never steals one.
//
// It also holds the two constructions both front ends share: a character
// class as one symbol (a byte set when every character is one byte, else a
// rule: one alternative for the one-byte characters, one per longer UTF-8
// shape), and a repetition unrolled into right-recursive helper rules.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "reference/constrained/grammar.h"
#include "reference/constrained/rule_graph.h"
#include "reference/constrained/utf8_ranges.h"

namespace servelab {

struct DraftSymbol {
    GrammarSymbol symbol;  // a kRule symbol's rule is an index into the DraftRules
    size_t offset = 0;     // where in the source text it was written
};
using DraftSequence = std::vector<DraftSymbol>;

class DraftRules {
  public:
    // The rule the source calls `name`, declared at its first mention.
    int32_t named_rule(const std::string& name);
    // Whether the source has mentioned `name`.
    bool has_named_rule(const std::string& name) const { return named_ids_.count(name) != 0; }
    // A new helper rule, to be named after `hint` when added to a builder.
    int32_t helper_rule(const std::string& hint);
    void add_alternative(int32_t rule, DraftSequence symbols);

    size_t num_rules() const { return rules_.size(); }
    const std::string& name(int32_t rule) const { return rules_[size_t(rule)].name; }
    bool is_helper(int32_t rule) const { return rules_[size_t(rule)].is_helper; }
    const std::vector<DraftSequence>& alternatives(int32_t rule) const {
        return rules_[size_t(rule)].alternatives;
    }
    // The elements the built grammar will have: one per symbol, one per alternative.
    size_t num_elements() const { return num_elements_; }
    // Each rule's alternatives as the rules they reference (rule_graph.h:
    // which rules can match "", which can begin with themselves).
    RuleShapes shapes() const;

    // One character of `ranges` (a set of code points, already negated if
    // need be): a byte-set symbol when every such character is one byte,
    // else a reference to a new helper rule. None when no character is in it.
    std::optional<DraftSymbol> character_class(const std::vector<CodepointRange>& ranges,
                                               const std::string& hint, size_t offset);
    // `item` min_count..max_count times (max_count < 0: no upper bound):
    // min_count copies (in a helper rule when more than one), then a loop
    // rule (loop ::= item loop | "") or a chain of optional tails
    // (tail_k ::= item tail_k-1 | ""). An item of more than one symbol is
    // wrapped in a helper rule first. The result is `item` itself for {1},
    // nothing for {0}, else one or two symbols: the unrolling goes into
    // helper rules (num_elements() tells the cost), so a caller's sequence
    // stays as long as its source text. An unbounded loop over an item that
    // can match "" would be left-recursive: callers keep it out.
    DraftSequence repetition(const DraftSequence& item, int min_count, int max_count,
                             const std::string& hint, size_t offset);

    // Adds every rule to `builder`: named rules under their names first, then
    // helpers under fresh names. Returns each draft rule's id in the builder.
    std::vector<int32_t> add_to(GrammarBuilder& builder) const;

  private:
    struct Rule {
        std::string name;  // the source's name, or a helper's hint
        bool is_helper = false;
        std::vector<DraftSequence> alternatives;
    };
    std::vector<Rule> rules_;
    std::unordered_map<std::string, int32_t> named_ids_;
    size_t num_elements_ = 0;
};

// A reference to draft rule `rule`, written at `offset`.
inline DraftSymbol draft_reference(int32_t rule, size_t offset) {
    return {GrammarSymbol::of_rule(rule), offset};
}

}  // namespace servelab
