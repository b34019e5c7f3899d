// grammar_oracle.h — an Earley recognizer: the independent judge of what a Grammar accepts.
//
// Lab 12 test support (chapter 11.6, constrained decoding). The parsers
// (GBNF, regex, JSON schema) and the pushdown matcher are all checked
// against this: a textbook Earley recognizer over the flat grammar
// (grammar.h), written for plainness rather than speed, sharing no code
// with the matcher. Empty rules are handled as Aycock and Horspool do:
// predicting a rule that can match "" also steps over it. Nullability and
// productivity are computed here, not taken from Grammar::nullable(), by
// plain fixed points: fine for test grammars, slow on a chain of many
// thousand rules.
//
// An Earley item is (position, origin): `position` is the index of the
// next element to match in the flat array (a kEnd element means the
// alternative is complete), `origin` the input offset where the
// alternative started. Set k holds the items alive after k bytes.
//
// Alternatives that mention an unproductive rule (one that derives no
// finite string) are never predicted, so every item in a set can still be
// completed: a set that is not empty means the input is a prefix of some
// sentence.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "reference/constrained/grammar.h"

namespace servelab::test {

namespace grammar_oracle_detail {

using Kind = GrammarElement::Kind;

// The rule references of the alternative starting at `start`.
inline std::vector<int32_t> references_of(const Grammar& g, int32_t start) {
    std::vector<int32_t> rules;
    for (int32_t i = start; g.element(i).kind != Kind::kEnd; ++i) {
        if (g.element(i).kind == Kind::kRule) rules.push_back(g.element(i).index);
    }
    return rules;
}

inline bool all_bytes_free(const Grammar& g, int32_t start) {
    for (int32_t i = start; g.element(i).kind != Kind::kEnd; ++i) {
        if (g.element(i).kind == Kind::kBytes) return false;
    }
    return true;
}

// The least derivation depth of the alternative starting at `start`, given
// each rule's (as far as known); -1 when it mentions an unproductive rule.
inline int alternative_depth(const Grammar& g, const std::vector<int>& depth, int32_t start) {
    int d = 1;
    for (const int32_t ref : references_of(g, start)) {
        if (depth[size_t(ref)] < 0) return -1;
        d = std::max(d, depth[size_t(ref)] + 1);
    }
    return d;
}

// Each rule's least derivation depth (an alternative of bytes only is
// depth 1; one with references, 1 + the deepest of them); -1 for a rule
// that derives no finite string (unproductive). Plain fixed point.
inline std::vector<int> min_depths(const Grammar& g) {
    std::vector<int> depth(g.num_rules(), -1);
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < int32_t(g.num_rules()); ++r) {
            for (const int32_t start : g.alternatives(r)) {
                const int d = alternative_depth(g, depth, start);
                if (d > 0 && (depth[size_t(r)] < 0 || d < depth[size_t(r)])) {
                    depth[size_t(r)] = d;
                    changed = true;
                }
            }
        }
    }
    return depth;
}

// Which rules match "": plain fixed point.
inline std::vector<bool> nullable_rules(const Grammar& g) {
    std::vector<bool> nullable(g.num_rules(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < int32_t(g.num_rules()); ++r) {
            if (nullable[size_t(r)]) continue;
            for (const int32_t start : g.alternatives(r)) {
                bool all = all_bytes_free(g, start);
                for (const int32_t ref : references_of(g, start))
                    all = all && nullable[size_t(ref)];
                if (all) {
                    nullable[size_t(r)] = changed = true;
                    break;
                }
            }
        }
    }
    return nullable;
}

class EarleyRecognizer {
  public:
    explicit EarleyRecognizer(const Grammar& g)
        : g_(g), nullable_(nullable_rules(g)), depth_(min_depths(g)) {}

    // Runs the input through; false as soon as a set is empty.
    bool run(std::string_view bytes) {
        sets_.assign(1, {});
        seen_.assign(1, {});
        predict(g_.root_rule(), 0);
        close(0);
        return !sets_[0].empty() && extend(bytes);
    }

    // Runs `more` after what was run so far (a run() first); false as soon
    // as a set is empty (the sets of the bytes taken stay, for truncate).
    bool extend(std::string_view more) {
        for (const char byte : more) {
            const size_t k = sets_.size() - 1;
            if (sets_[k].empty()) return false;
            sets_.emplace_back();
            seen_.emplace_back();
            scan(k, uint8_t(byte));
            close(k + 1);
            if (sets_[k + 1].empty()) return false;
        }
        return !sets_.back().empty();
    }

    // Forgets all but the first `num_bytes` bytes run (extend can go on
    // from there): one recognizer checks many continuations of one prefix.
    void truncate(size_t num_bytes) {
        sets_.resize(num_bytes + 1);
        seen_.resize(num_bytes + 1);
    }
    size_t bytes_run() const { return sets_.size() - 1; }

    // After run(): whether the whole input is a sentence.
    bool complete_sentence() const {
        for (const Item& item : sets_.back()) {
            const GrammarElement& e = g_.element(item.position);
            if (e.kind == Kind::kEnd && e.index == g_.root_rule() && item.origin == 0) return true;
        }
        return false;
    }

  private:
    struct Item {
        int32_t position;
        int32_t origin;
    };

    void add(size_t k, Item item) {
        const uint64_t key = (uint64_t(uint32_t(item.position)) << 32) | uint32_t(item.origin);
        if (seen_[k].insert(key).second) sets_[k].push_back(item);
    }

    // Predicts and completes in set k until nothing changes (the set grows
    // while it is processed: walked by index).
    void close(size_t k) {
        for (size_t i = 0; i < sets_[k].size(); ++i) {
            const Item item = sets_[k][i];
            const GrammarElement& e = g_.element(item.position);
            if (e.kind == Kind::kEnd) {
                complete(e.index, item.origin, k);
            } else if (e.kind == Kind::kRule) {
                predict(e.index, k);
                if (nullable_[size_t(e.index)]) add(k, {item.position + 1, item.origin});
            }
        }
    }

    // The items of set k whose byte set holds `byte` move on, into set k + 1.
    void scan(size_t k, uint8_t byte) {
        for (const Item item : sets_[k]) {
            const GrammarElement& e = g_.element(item.position);
            if (e.kind == Kind::kBytes && g_.byte_set(e.index).contains(byte)) {
                add(k + 1, {item.position + 1, item.origin});
            }
        }
    }

    void predict(int32_t rule, size_t k) {
        for (const int32_t start : g_.alternatives(rule)) {
            bool productive = true;
            for (const int32_t ref : references_of(g_, start)) {
                productive = productive && depth_[size_t(ref)] >= 0;
            }
            if (productive) add(k, {start, int32_t(k)});
        }
    }

    // Every item of set `origin` waiting for `rule` moves past it, into set k.
    void complete(int32_t rule, int32_t origin, size_t k) {
        for (size_t i = 0; i < sets_[size_t(origin)].size(); ++i) {
            const Item waiting = sets_[size_t(origin)][i];
            const GrammarElement& e = g_.element(waiting.position);
            if (e.kind == Kind::kRule && e.index == rule) {
                add(k, {waiting.position + 1, waiting.origin});
            }
        }
    }

    const Grammar& g_;
    std::vector<bool> nullable_;
    std::vector<int> depth_;
    std::vector<std::vector<Item>> sets_;
    std::vector<std::unordered_set<uint64_t>> seen_;
};

// Appends a random sentence of `rule` (see sample_sentence).
inline void sample_rule(const Grammar& g, const std::vector<int>& depth, int32_t rule,
                        int depth_left, int max_depth, std::mt19937_64& rng, std::string& out) {
    // The alternatives that fit in depth_left; deep down (past half the
    // budget) only the shallowest, so that the sentence closes; over the
    // budget (a root deeper than max_depth), the shallowest anyway.
    const bool deep = depth_left < max_depth / 2;
    std::vector<int32_t> fitting, shallowest;
    for (const int32_t start : g.alternatives(rule)) {
        const int d = alternative_depth(g, depth, start);
        if (d == depth[size_t(rule)]) shallowest.push_back(start);
        if (d > 0 && d <= depth_left && (!deep || d == depth[size_t(rule)])) {
            fitting.push_back(start);
        }
    }
    if (fitting.empty()) fitting = shallowest;
    const int32_t start =
        fitting[std::uniform_int_distribution<size_t>(0, fitting.size() - 1)(rng)];
    for (int32_t i = start; g.element(i).kind != Kind::kEnd; ++i) {
        const GrammarElement& e = g.element(i);
        if (e.kind == Kind::kRule) {
            sample_rule(g, depth, e.index, depth_left - 1, max_depth, rng, out);
            continue;
        }
        std::vector<uint8_t> members;
        for (int b = 0; b < 256; ++b) {
            if (g.byte_set(e.index).contains(uint8_t(b))) members.push_back(uint8_t(b));
        }
        out += char(members[std::uniform_int_distribution<size_t>(0, members.size() - 1)(rng)]);
    }
}

}  // namespace grammar_oracle_detail

// Whether all of `bytes` is a sentence of `g`.
inline bool grammar_accepts(const Grammar& g, std::string_view bytes) {
    grammar_oracle_detail::EarleyRecognizer recognizer(g);
    return recognizer.run(bytes) && recognizer.complete_sentence();
}

// Whether some sentence of `g` starts with `bytes` (itself included).
inline bool grammar_accepts_prefix(const Grammar& g, std::string_view bytes) {
    grammar_oracle_detail::EarleyRecognizer recognizer(g);
    return recognizer.run(bytes);
}

// grammar_accepts_prefix(g, prefix + more) and grammar_accepts(g, prefix +
// more) for many `more` after one `prefix`: the prefix is run once, and each
// continuation from its sets (the check a token mask needs: every token
// after the output so far).
class PrefixContinuations {
  public:
    PrefixContinuations(const Grammar& g, std::string_view prefix) : recognizer_(g) {
        viable_ = recognizer_.run(prefix);
        prefix_bytes_ = prefix.size();
    }
    // Whether some sentence starts with prefix + more.
    bool accepts_prefix(std::string_view more) {
        if (!viable_) return false;
        const bool viable = recognizer_.extend(more);
        recognizer_.truncate(prefix_bytes_);
        return viable;
    }
    // Whether prefix + more is a whole sentence.
    bool accepts(std::string_view more) {
        if (!viable_) return false;
        const bool whole = recognizer_.extend(more) && recognizer_.complete_sentence();
        recognizer_.truncate(prefix_bytes_);
        return whole;
    }

  private:
    grammar_oracle_detail::EarleyRecognizer recognizer_;
    bool viable_ = false;
    size_t prefix_bytes_ = 0;
};

// A random sentence of `g`: a random derivation from the root that picks,
// at each rule, among the alternatives whose least depth fits what is left
// of `max_depth`, and past half of it only the shallowest, so it ends.
// Throws std::invalid_argument when the root derives no finite string.
inline std::string sample_sentence(const Grammar& g, std::mt19937_64& rng, int max_depth) {
    const std::vector<int> depth = grammar_oracle_detail::min_depths(g);
    if (depth[size_t(g.root_rule())] < 0) {
        throw std::invalid_argument("the grammar's root derives no finite sentence");
    }
    std::string out;
    grammar_oracle_detail::sample_rule(g, depth, g.root_rule(), max_depth, max_depth, rng, out);
    return out;
}

}  // namespace servelab::test
