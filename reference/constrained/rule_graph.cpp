// rule_graph.cpp — see rule_graph.h.
#include "reference/constrained/rule_graph.h"

namespace servelab {
namespace {

// The "may begin with" edges of each rule, each with the reference it comes from.
std::vector<std::vector<RuleReference>> begins_with(const RuleShapes& rules,
                                                    const std::vector<bool>& nullable) {
    std::vector<std::vector<RuleReference>> edges(rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
        for (size_t a = 0; a < rules[r].size(); ++a) {
            const std::vector<int32_t>& symbols = rules[r][a];
            for (size_t s = 0; s < symbols.size(); ++s) {
                if (symbols[s] == kByteSetSymbol) break;
                edges[r].push_back({int32_t(r), int32_t(a), int32_t(s)});
                if (!nullable[size_t(symbols[s])]) break;
            }
        }
    }
    return edges;
}

}  // namespace

std::vector<bool> nullable_rules(const RuleShapes& rules) {
    // An alternative matches "" once all its symbols do: count down the ones
    // not yet known to, and visit a rule's users once, when it is found nullable.
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
            for (const int32_t symbol : rules[r][a]) {
                if (symbol != kByteSetSymbol) uses[size_t(symbol)].push_back({r, a});
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

// Depth-first over the edges; an edge back to a rule on the path closes a cycle.
std::optional<LeftRecursion> find_left_recursion(const RuleShapes& rules,
                                                 const std::vector<bool>& nullable) {
    const std::vector<std::vector<RuleReference>> edges = begins_with(rules, nullable);
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
            const RuleReference edge = edges[size_t(top.rule)][top.next_edge++];
            const int32_t next =
                rules[size_t(edge.rule)][size_t(edge.alternative)][size_t(edge.symbol)];
            if (state[size_t(next)] == kOnPath) {
                LeftRecursion found{{}, edge};
                for (const Frame& f : path) {
                    if (f.rule == next || !found.cycle.empty()) found.cycle.push_back(f.rule);
                }
                return found;
            }
            if (state[size_t(next)] == kUnseen) {
                state[size_t(next)] = kOnPath;
                path.push_back({next, 0});
            }
        }
    }
    return std::nullopt;
}

}  // namespace servelab
