// grammar.cpp — see grammar.h.
#include "reference/constrained/grammar.h"

#include <fmt/format.h>

#include <optional>

#include "reference/constrained/rule_graph.h"

namespace servelab {
namespace {

using Alternatives = std::vector<std::vector<std::vector<GrammarSymbol>>>;

RuleShapes shapes_of(const Alternatives& rules) {
    RuleShapes shapes(rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
        for (const auto& alternative : rules[r]) {
            std::vector<int32_t>& symbols = shapes[r].emplace_back();
            for (const GrammarSymbol& s : alternative) {
                symbols.push_back(s.kind == GrammarSymbol::Kind::kBytes ? kByteSetSymbol : s.rule);
            }
        }
    }
    return shapes;
}

// Throws naming the first left-recursive cycle found.
void refuse_left_recursion(const RuleShapes& shapes, const std::vector<bool>& nullable,
                           const std::vector<std::string>& names) {
    const std::optional<LeftRecursion> found = find_left_recursion(shapes, nullable);
    if (!found) return;
    std::string cycle;
    for (const int32_t rule : found->cycle) cycle += names[size_t(rule)] + " -> ";
    const std::string& rule = names[size_t(found->cycle.front())];
    throw GrammarError(
        fmt::format("grammar rule '{}' is left-recursive ({}{}); rewrite it with repetition", rule,
                    cycle, rule));
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
    const RuleShapes shapes = shapes_of(alternatives_);
    g.nullable_ = nullable_rules(shapes);
    refuse_left_recursion(shapes, g.nullable_, names_);
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
