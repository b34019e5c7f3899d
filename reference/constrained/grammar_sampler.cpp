// grammar_sampler.cpp — see grammar_sampler.h.
#include "reference/constrained/grammar_sampler.h"

#include <queue>
#include <tuple>

namespace servelab {
namespace {

using Kind = GrammarElement::Kind;

// An alternative being priced: the bytes it matches itself plus the
// shortest sentences of the rules it references, once all are known.
struct AlternativePrice {
    int32_t rule = -1;
    int64_t bytes = 0;
    int32_t unknown_references = 0;
};

}  // namespace

GrammarSampler::GrammarSampler(const Grammar& grammar)
    : grammar_(grammar),
      shortest_(grammar.num_rules(), -1),
      shortest_via_(grammar.num_rules(), -1),
      productive_alternatives_(grammar.num_rules()) {
    // Knuth: like Dijkstra, settle the rule with the cheapest alternative
    // whose references are all settled; that alternative's price is final.
    std::vector<AlternativePrice> prices(grammar.num_elements());          // by alternative start
    std::vector<std::vector<int32_t>> referenced_by(grammar.num_rules());  // alternative starts
    using Candidate = std::tuple<int64_t, int32_t, int32_t>;  // (price, rule, alternative)
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> ready;
    for (int32_t r = 0; r < int32_t(grammar.num_rules()); ++r) {
        for (const int32_t start : grammar.alternatives(r)) {
            AlternativePrice& price = prices[size_t(start)];
            price.rule = r;
            for (int32_t i = start; grammar.element(i).kind != Kind::kEnd; ++i) {
                if (grammar.element(i).kind == Kind::kBytes) {
                    ++price.bytes;
                } else {
                    ++price.unknown_references;
                    referenced_by[size_t(grammar.element(i).index)].push_back(start);
                }
            }
            if (price.unknown_references == 0) ready.emplace(price.bytes, r, start);
        }
    }
    while (!ready.empty()) {
        const auto [length, rule, start] = ready.top();
        ready.pop();
        if (shortest_[size_t(rule)] >= 0) continue;
        shortest_[size_t(rule)] = length;
        shortest_via_[size_t(rule)] = start;
        for (const int32_t user : referenced_by[size_t(rule)]) {  // once per reference
            AlternativePrice& price = prices[size_t(user)];
            price.bytes += length;
            if (--price.unknown_references == 0) ready.emplace(price.bytes, price.rule, user);
        }
    }
    if (shortest_[size_t(grammar.root_rule())] < 0) {
        throw GrammarError("the grammar derives no finite sentence");
    }
    for (int32_t r = 0; r < int32_t(grammar.num_rules()); ++r) {
        for (const int32_t start : grammar.alternatives(r)) {
            bool productive = true;
            for (int32_t i = start; grammar.element(i).kind != Kind::kEnd; ++i) {
                const GrammarElement& e = grammar.element(i);
                productive =
                    productive && (e.kind == Kind::kBytes || shortest_[size_t(e.index)] >= 0);
            }
            if (productive) productive_alternatives_[size_t(r)].push_back(start);
        }
    }
}

int32_t GrammarSampler::pick_alternative(int32_t rule, bool closing, std::mt19937_64& rng) const {
    if (closing) return shortest_via_[size_t(rule)];
    const std::vector<int32_t>& choices = productive_alternatives_[size_t(rule)];
    return choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
}

std::string GrammarSampler::sample(std::mt19937_64& rng, size_t soft_max_bytes) const {
    // Past this many expansions it closes too: rules that match "" could
    // otherwise spin a long while without growing the sentence.
    const size_t max_expansions = 64 * soft_max_bytes + 1024;
    std::string sentence;
    std::vector<int32_t> pending = {pick_alternative(grammar_.root_rule(), false, rng)};
    for (size_t expansions = 0; !pending.empty();) {
        const int32_t position = pending.back();
        pending.pop_back();
        const GrammarElement& e = grammar_.element(position);
        if (e.kind == Kind::kEnd) continue;
        pending.push_back(position + 1);
        if (e.kind == Kind::kRule) {
            const bool closing = sentence.size() >= soft_max_bytes || ++expansions > max_expansions;
            pending.push_back(pick_alternative(e.index, closing, rng));
            continue;
        }
        std::vector<uint8_t> members;
        for (int b = 0; b < 256; ++b) {
            if (grammar_.byte_set(e.index).contains(uint8_t(b))) members.push_back(uint8_t(b));
        }
        sentence +=
            char(members[std::uniform_int_distribution<size_t>(0, members.size() - 1)(rng)]);
    }
    return sentence;
}

}  // namespace servelab
