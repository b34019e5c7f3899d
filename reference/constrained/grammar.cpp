// grammar.cpp — see grammar.h.
#include "reference/constrained/grammar.h"

#include <fmt/format.h>

namespace servelab {
namespace {

using Alternatives = std::vector<std::vector<std::vector<GrammarSymbol>>>;

// Which rules match "": the least fixed point, by a worklist so that it
// takes linear time even on a long chain of rules. An alternative matches
// "" once all its symbols do; count down the ones not yet known to (a byte
// set never will), and visit a rule's users once, when it is found nullable.
std::vector<bool> nullable_rules(const Alternatives& rules) {
    struct Use {
        size_t rule, alternative;
    };
    std::vector<std::vector<Use>> uses(rules.size());
    std::vector<std::vector<size_t>> pending(rules.size());
    std::vector<size_t> found;
    for (size_t r = 0; r < rules.size(); ++r) {
        for (size_t a = 0; a < rules[r].size(); ++a) {
            pending[r].push_back(rules[r][a].size());
            if (rules[r][a].empty()) found.push_back(r);
            for (const GrammarSymbol& s : rules[r][a]) {
                if (s.kind == GrammarSymbol::Kind::kRule) uses[size_t(s.rule)].push_back({r, a});
            }
        }
    }
    std::vector<bool> nullable(rules.size(), false);
    while (!found.empty()) {
        const size_t rule = found.back();
        found.pop_back();
        if (nullable[rule]) continue;
        nullable[rule] = true;
        for (const Use& use : uses[rule]) {
            if (--pending[use.rule][use.alternative] == 0) found.push_back(use.rule);
        }
    }
    return nullable;
}

// The rules each rule can start with: those it references before its first
// symbol that cannot match "". A cycle among them is left recursion.
std::vector<std::vector<int32_t>> leftmost_references(const Alternatives& rules,
                                                      const std::vector<bool>& nullable) {
    std::vector<std::vector<int32_t>> edges(rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
        for (const auto& alternative : rules[r]) {
            for (const GrammarSymbol& s : alternative) {
                if (s.kind == GrammarSymbol::Kind::kBytes) break;
                edges[r].push_back(s.rule);
                if (!nullable[size_t(s.rule)]) break;
            }
        }
    }
    return edges;
}

// Throws naming the first left-recursive cycle found: a depth-first search
// with an explicit stack (a long chain of rules must not exhaust the call
// stack), where an edge back to a rule on the path closes a cycle.
void refuse_left_recursion(const std::vector<std::vector<int32_t>>& edges,
                           const std::vector<std::string>& names) {
    enum : uint8_t { kUnseen, kOnPath, kDone };
    std::vector<uint8_t> state(edges.size(), kUnseen);
    struct Frame {
        int32_t rule;
        size_t next_edge;
    };
    for (size_t start = 0; start < edges.size(); ++start) {
        if (state[start] != kUnseen) continue;
        std::vector<Frame> path = {{int32_t(start), 0}};
        state[start] = kOnPath;
        while (!path.empty()) {
            Frame& top = path.back();
            if (top.next_edge == edges[size_t(top.rule)].size()) {
                state[size_t(top.rule)] = kDone;
                path.pop_back();
                continue;
            }
            const int32_t next = edges[size_t(top.rule)][top.next_edge++];
            if (state[size_t(next)] == kOnPath) {
                std::string cycle;
                bool in_cycle = false;
                for (const Frame& f : path) {
                    in_cycle = in_cycle || f.rule == next;
                    if (in_cycle) cycle += names[size_t(f.rule)] + " -> ";
                }
                throw GrammarError(fmt::format(
                    "grammar rule '{}' is left-recursive ({}{}); rewrite it with repetition",
                    names[size_t(next)], cycle, names[size_t(next)]));
            }
            if (state[size_t(next)] == kUnseen) {
                state[size_t(next)] = kOnPath;
                path.push_back({next, 0});
            }
        }
    }
}

std::string byte_set_text(const ByteSet& set) {
    std::string text = "[";
    for (int b = 0; b < 256; ++b) {
        if (!set.contains(uint8_t(b))) continue;
        int end = b;
        while (end + 1 < 256 && set.contains(uint8_t(end + 1))) ++end;
        const auto show = [](int x) {
            return x >= 0x21 && x < 0x7f && x != '\\' && x != ']' && x != '-'
                       ? std::string(1, char(x))
                       : fmt::format("\\x{:02X}", x);
        };
        text += show(b);
        if (end > b) text += "-" + show(end);
        b = end;
    }
    return text + "]";
}

}  // namespace

int32_t GrammarBuilder::rule(const std::string& name) {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = int32_t(names_.size());
    names_.push_back(name);
    ids_.emplace(name, id);
    alternatives_.emplace_back();
    return id;
}

int32_t GrammarBuilder::fresh_rule(const std::string& hint) {
    if (!has_rule(hint)) return rule(hint);
    for (int i = 1;; ++i) {
        const std::string name = fmt::format("{}-{}", hint, i);
        if (!has_rule(name)) return rule(name);
    }
}

void GrammarBuilder::add_alternative(int32_t rule, std::vector<GrammarSymbol> symbols) {
    for (const GrammarSymbol& s : symbols) {
        if (s.kind == GrammarSymbol::Kind::kRule &&
            (s.rule < 0 || size_t(s.rule) >= names_.size())) {
            throw GrammarError(
                fmt::format("grammar rule '{}' refers to rule id {}, which does not exist",
                            names_[size_t(rule)], s.rule));
        }
        if (s.kind == GrammarSymbol::Kind::kBytes && s.bytes.empty()) {
            throw GrammarError(
                fmt::format("grammar rule '{}' has an empty byte set, which matches nothing",
                            names_[size_t(rule)]));
        }
    }
    alternatives_[size_t(rule)].push_back(std::move(symbols));
}

Grammar GrammarBuilder::build(const std::string& root) const {
    const auto root_it = ids_.find(root);
    if (root_it == ids_.end())
        throw GrammarError(fmt::format("the grammar has no rule '{}'", root));
    for (size_t r = 0; r < names_.size(); ++r) {
        if (alternatives_[r].empty()) {
            throw GrammarError(
                fmt::format("grammar rule '{}' is used but never defined", names_[r]));
        }
    }
    Grammar g;
    g.root_rule_ = root_it->second;
    g.rule_names_ = names_;
    g.nullable_ = nullable_rules(alternatives_);
    refuse_left_recursion(leftmost_references(alternatives_, g.nullable_), names_);
    g.rule_alternatives_.resize(names_.size());
    for (size_t r = 0; r < names_.size(); ++r) {
        for (const auto& alternative : alternatives_[r]) {
            g.rule_alternatives_[r].push_back(int32_t(g.elements_.size()));
            for (const GrammarSymbol& s : alternative) {
                if (s.kind == GrammarSymbol::Kind::kRule) {
                    g.elements_.push_back({GrammarElement::Kind::kRule, s.rule});
                } else {
                    g.elements_.push_back(
                        {GrammarElement::Kind::kBytes, int32_t(g.byte_sets_.size())});
                    g.byte_sets_.push_back(s.bytes);
                }
            }
            g.elements_.push_back({GrammarElement::Kind::kEnd, int32_t(r)});
        }
    }
    return g;
}

std::string Grammar::to_string() const {
    std::string text;
    for (size_t r = 0; r < num_rules(); ++r) {
        text += rule_names_[r] + " ::=";
        const auto alts = alternatives(int32_t(r));
        for (size_t a = 0; a < alts.size(); ++a) {
            if (a > 0) text += " |";
            for (int32_t i = alts[a]; element(i).kind != GrammarElement::Kind::kEnd; ++i) {
                const GrammarElement& e = element(i);
                text += " " + (e.kind == GrammarElement::Kind::kRule
                                   ? rule_names_[size_t(e.index)]
                                   : byte_set_text(byte_set(e.index)));
            }
        }
        text += "\n";
    }
    return text;
}

}  // namespace servelab
