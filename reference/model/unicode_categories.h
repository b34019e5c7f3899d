// unicode_categories.h — the few Unicode facts the tokenizer needs.
//
// Part of the model loader (all labs; tokenizer). Pre-tokenizer rules are
// written in terms of \p{L} (letters), \p{N} (numbers), \p{P} (punctuation)
// and \s (white space), so we need those classes for every code point, plus
// UTF-8 decoding and encoding. The category ranges are generated from Python's
// unicodedata by tools/goldens/gen_unicode_tables.py into unicode_tables.cpp; there is
// no run-time dependency on ICU.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

// Inclusive range of code points [first, last].
struct CodepointRange {
    uint32_t first;
    uint32_t last;
};

// Generated tables (unicode_tables.cpp): sorted and non-overlapping.
std::span<const CodepointRange> letter_ranges();       // Lu Ll Lt Lm Lo
std::span<const CodepointRange> number_ranges();       // Nd Nl No
std::span<const CodepointRange> punctuation_ranges();  // Pc Pd Ps Pe Pi Pf Po

bool is_letter(uint32_t cp);       // \p{L}
bool is_number(uint32_t cp);       // \p{N}
bool is_punctuation(uint32_t cp);  // \p{P}
bool is_whitespace(uint32_t cp);   // \s: the Unicode White_Space property

// The replacement character, standing in for bytes that are not UTF-8.
inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Decode text to code points the way llama.cpp does, so that token ids match
// it even on broken input. The lead byte alone decides the length and only the
// 10xxxxxx shape of continuation bytes is checked: overlong forms (C0 80) and
// surrogates (ED A0 80) are accepted as the value they spell. A byte that cannot
// start a sequence, a truncated sequence, or a value above U+10FFFF becomes
// one U+FFFD and decoding resumes at the next byte.
std::vector<uint32_t> decode_utf8_lenient(std::string_view text);

// Append the UTF-8 encoding of `cp` (at most U+10FFFF; surrogates are encoded
// as-is, mirroring decode_utf8_lenient).
void append_utf8(std::string& out, uint32_t cp);

// Length in bytes of the complete, strictly valid UTF-8 character at the start
// of `bytes` (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
// Returns 0 when `bytes` is a valid but unfinished prefix of a character (more
// bytes could complete it), and -1 when the first byte(s) can never be valid;
// in that case `*bad_length` (if given) is how many bytes to replace with one
// U+FFFD (the "maximal subpart" rule of the Unicode standard).
int utf8_char_length(std::string_view bytes, int* bad_length = nullptr);

}  // namespace servelab
