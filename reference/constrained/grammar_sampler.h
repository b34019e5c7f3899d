// grammar_sampler.h — random sentences of a grammar.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
// `servelab grammar --sample` prints them, and the tests feed them to
// independent validators (Python's json and jsonschema): a sentence the
// validator rejects is a bug in the grammar, found without a model.
//
// A random derivation from the root: each rule expands to one of its
// alternatives at random, each byte set gives one of its bytes at random
// (the UTF-8 classes of utf8_ranges.h are byte runs of whole characters, so
// any pick is valid UTF-8). Random choices alone may never end (an array of
// arrays of ...), so once the sentence is `soft_max_bytes` long every rule
// takes the alternative that ends soonest: the one its shortest sentence
// comes from, computed once per grammar by Knuth's generalization of
// Dijkstra's algorithm (Knuth 1977, "A generalization of Dijkstra's
// algorithm"). Those choices form no cycle, so the sentence then closes
// in as few bytes as the grammar allows.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/constrained/grammar.h"

namespace servelab {

class GrammarSampler {
  public:
    // Throws GrammarError when the root derives no finite sentence.
    explicit GrammarSampler(const Grammar& grammar);

    // One random sentence; past `soft_max_bytes` it closes as fast as it can.
    std::string sample(std::mt19937_64& rng, size_t soft_max_bytes = 256) const;

    // The length of the shortest sentence of `rule` (-1: it derives none).
    int64_t shortest_length(int32_t rule) const { return shortest_[size_t(rule)]; }

  private:
    int32_t pick_alternative(int32_t rule, bool closing, std::mt19937_64& rng) const;

    const Grammar& grammar_;
    std::vector<int64_t> shortest_;      // by rule; -1: derives no finite sentence
    std::vector<int32_t> shortest_via_;  // by rule: the alternative (start) it comes from
    std::vector<std::vector<int32_t>> productive_alternatives_;  // by rule
};

}  // namespace servelab
