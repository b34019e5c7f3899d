// regex_grammar.h — a regular expression, and a list of choices, as grammar rules.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise. The
// regex must match the whole output (Python's re.fullmatch; a leading ^ and
// trailing $ are allowed and mean the same). Supported, as Python's `re`
// reads them: literals and escapes (\n \t \xHH \uHHHH \UHHHHHHHH \0 ...,
// \. and any other escaped punctuation), . (any character but a newline)
// [...] [^...] \d \w \s \D \W \S, groups ( ) (?: ) and named groups
// (?P<name> ) (?<name> ), alternation, * + ? {m} {m,} {,n} {m,n} and their
// lazy forms (laziness cannot matter to a whole-output match). \d \w \s
// are ASCII, as with Python's re.ASCII flag: [0-9], [a-zA-Z0-9_] and
// [ \t\n\r\f\v]; their negations and [^...] range over all of Unicode.
// Anything else (backreferences, lookaround, inline flags, possessive
// quantifiers, atomic groups, \b, anchors inside, a class that matches no
// character) throws GrammarError "regex column C: <what>" naming the
// construct, never matched loosely; so do Python's own syntax errors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "reference/constrained/grammar.h"

namespace servelab {

// Limits that keep a hostile pattern's grammar small: the pattern's size,
// a repetition count, and the elements (grammar.h) its rules unroll to.
inline constexpr size_t kMaxRegexBytes = 4096;
inline constexpr int kMaxRegexRepetition = 1000;
inline constexpr size_t kMaxRegexElements = size_t(1) << 17;

// A new rule (named after `hint`) matching exactly the strings of `pattern`.
int32_t add_regex_rule(GrammarBuilder& builder, std::string_view pattern, const std::string& hint);
// A grammar whose root matches exactly the strings of `pattern`.
Grammar regex_grammar(std::string_view pattern);
// A grammar whose root matches exactly one of `choices` (vLLM's structured
// output "choice"). Throws GrammarError when the list is empty.
Grammar choice_grammar(const std::vector<std::string>& choices);

}  // namespace servelab
