// utf8_ranges.h — a class of Unicode characters as byte-level grammar rules.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
// Grammars here match bytes (grammar.h), but users write characters:
// "[^\"\\\\]" in a JSON string, "[α-ω]" in a regex. A range of code points
// is, in UTF-8, a few runs of 1 to 4 bytes, each byte within a range; this
// file splits code point ranges into those runs (the classic construction
// RE2 and Rust's regex-syntax use) and adds them to a rule as alternatives.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reference/constrained/grammar.h"

namespace servelab {

// Inclusive code point range.
struct CodepointRange {
    uint32_t low = 0;
    uint32_t high = 0;
};

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// The code points from 0 to kMaxCodepoint not in `ranges` (surrogates
// U+D800..U+DFFF excluded, as UTF-8 cannot carry them).
std::vector<CodepointRange> complement_codepoints(std::vector<CodepointRange> ranges);

// The byte sequences of the UTF-8 encodings of the code points in
// `ranges`, as sequences of byte sets (surrogates left out), in code point
// order: every code point's encoding matches exactly one sequence.
std::vector<std::vector<ByteSet>> utf8_sequences(const std::vector<CodepointRange>& ranges);

// A new rule (named after `hint`) matching exactly one character of
// `ranges` (or, with `negated`, of its complement), in UTF-8. Throws
// GrammarError when the class is empty.
int32_t add_codepoint_class_rule(GrammarBuilder& builder, std::vector<CodepointRange> ranges,
                                 bool negated, const std::string& hint);

// The UTF-8 encoding of one code point (kMaxCodepoint at most).
std::string utf8_encode(uint32_t codepoint);

}  // namespace servelab
