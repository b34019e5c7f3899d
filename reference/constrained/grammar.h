// grammar.h — a context-free grammar over bytes: what constrained decoding enforces.
//
// Lab 12 (chapter 11.6, decoding strategies: constrained decoding). Every
// constraint a request can carry (a JSON schema, a regex, a list of choices,
// a GBNF grammar) is compiled to one of these (gbnf_parser.h,
// json_schema_to_gbnf.h, regex_to_gbnf.h), and the matcher
// (grammar_matcher.h) walks it one byte at a time.
//
// Shape: rules of alternatives; an alternative is a sequence of symbols,
// each either a set of bytes (one byte of input, any of the set) or a
// reference to a rule. An empty alternative matches the empty string.
// Working on bytes, not characters, is what lets a token that ends halfway
// through a UTF-8 character be checked like any other: a character is just
// a short sequence of byte sets.
//
// Stored flat, as the matcher wants it: every alternative is a run of
// Elements in one array, closed by a kEnd element, so "where the matcher is"
// is one int32 (the index of the next element to match) and a pushdown
// stack is a vector of them.
//
// Rules may recurse, but not on the left (A ::= A "x" would make a
// pushdown matcher expand A forever); GrammarBuilder::build refuses that.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/common/error.h"

namespace servelab {

// A grammar that cannot be built or compiled: one line naming the rule, or
// (from a parser) the line and column.
class GrammarError : public Error {
  public:
    using Error::Error;
};

// A set of byte values, 256 bits.
struct ByteSet {
    std::array<uint64_t, 4> bits{};

    bool contains(uint8_t byte) const { return (bits[byte >> 6] >> (byte & 63)) & 1; }
    void add(uint8_t byte) { bits[byte >> 6] |= uint64_t(1) << (byte & 63); }
    void add_range(uint8_t low, uint8_t high) {  // inclusive
        for (int b = low; b <= high; ++b) add(uint8_t(b));
    }
    bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
    ByteSet complement() const {
        ByteSet out;
        for (size_t i = 0; i < 4; ++i) out.bits[i] = ~bits[i];
        return out;
    }
    static ByteSet single(uint8_t byte) {
        ByteSet s;
        s.add(byte);
        return s;
    }
    bool operator==(const ByteSet&) const = default;
};

// One symbol of an alternative while a grammar is being built.
struct GrammarSymbol {
    enum class Kind : uint8_t { kBytes, kRule };
    Kind kind = Kind::kBytes;
    ByteSet bytes;      // kBytes
    int32_t rule = -1;  // kRule

    static GrammarSymbol of_bytes(const ByteSet& set) { return {Kind::kBytes, set, -1}; }
    static GrammarSymbol of_byte(uint8_t byte) { return of_bytes(ByteSet::single(byte)); }
    static GrammarSymbol of_rule(int32_t rule) { return {Kind::kRule, {}, rule}; }
};

// One element of the flat array.
struct GrammarElement {
    enum class Kind : uint8_t { kBytes, kRule, kEnd };
    Kind kind = Kind::kEnd;
    int32_t index = -1;  // kBytes: into byte_sets(); kRule: the rule id; kEnd: the rule it closes
};

// The symbols that spell `bytes` literally, one byte set per byte.
inline std::vector<GrammarSymbol> literal_symbols(std::string_view bytes) {
    std::vector<GrammarSymbol> symbols;
    for (const char c : bytes) symbols.push_back(GrammarSymbol::of_byte(uint8_t(c)));
    return symbols;
}

class Grammar {
  public:
    int32_t root_rule() const { return root_rule_; }
    size_t num_rules() const { return rule_names_.size(); }
    const std::string& rule_name(int32_t rule) const { return rule_names_[size_t(rule)]; }
    // Index of the first element of each of `rule`'s alternatives.
    std::span<const int32_t> alternatives(int32_t rule) const {
        return rule_alternatives_[size_t(rule)];
    }
    const GrammarElement& element(int32_t index) const { return elements_[size_t(index)]; }
    size_t num_elements() const { return elements_.size(); }
    const ByteSet& byte_set(int32_t index) const { return byte_sets_[size_t(index)]; }
    // Whether `rule` can match the empty string.
    bool nullable(int32_t rule) const { return nullable_[size_t(rule)]; }
    // The grammar as GBNF-like text, one rule a line (for errors and tests).
    std::string to_string() const;

  private:
    friend class GrammarBuilder;
    int32_t root_rule_ = -1;
    std::vector<std::string> rule_names_;
    std::vector<std::vector<int32_t>> rule_alternatives_;
    std::vector<GrammarElement> elements_;
    std::vector<ByteSet> byte_sets_;
    std::vector<bool> nullable_;
};

class GrammarBuilder {
  public:
    // The id of the rule called `name`, declared now if it is new (a rule
    // may be referenced before its alternatives are added).
    int32_t rule(const std::string& name);
    // A rule named after `hint` that no other rule has yet ("hint", "hint-1", ...).
    int32_t fresh_rule(const std::string& hint);
    bool has_rule(const std::string& name) const { return ids_.count(name) != 0; }
    // Adds an alternative to `rule` (an empty one matches "").
    void add_alternative(int32_t rule, std::vector<GrammarSymbol> symbols);
    // Whether `rule` has any alternative yet.
    bool defined(int32_t rule) const { return !alternatives_[size_t(rule)].empty(); }
    size_t num_rules() const { return names_.size(); }

    // The grammar rooted at `root`. Throws GrammarError for a rule that is
    // referenced but never defined, and for left recursion (naming the cycle).
    Grammar build(const std::string& root) const;

  private:
    std::vector<std::string> names_;
    std::unordered_map<std::string, int32_t> ids_;
    std::vector<std::vector<std::vector<GrammarSymbol>>> alternatives_;
};

}  // namespace servelab
