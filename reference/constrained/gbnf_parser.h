// gbnf_parser.h — grammar text (GBNF, the EBNF dialect llama.cpp reads) to a Grammar.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
//   root  ::= "yes" | "no" ws item*      # rules, alternatives, comments
//   item  ::= [a-z0-9_]+ ("," [^\n]?){0,3}
// Literals "..." with escapes (\n \t \\ \" \xHH \uHHHH \UHHHHHHHH),
// character classes [...] and [^...] over Unicode code points (matched as
// UTF-8, utf8_ranges.h), `.` (any character), groups, and the repetitions
// * + ? {m} {m,} {m,n}. Repetitions become right-recursive helper rules, so
// the matcher's stacks stay short.
#pragma once

#include <string>
#include <string_view>

#include "reference/constrained/grammar.h"

namespace servelab {

// Throws GrammarError: "grammar line L column C: <what>", for a syntax
// error, an undefined rule, left recursion, a repetition bound over
// kMaxGbnfRepetition, or a missing `root`.
Grammar parse_gbnf(std::string_view text, const std::string& root = "root");

// Adds the rules of `text` to `builder` (names kept), without building.
void add_gbnf_rules(GrammarBuilder& builder, std::string_view text);

inline constexpr int kMaxGbnfRepetition = 10000;

}  // namespace servelab
