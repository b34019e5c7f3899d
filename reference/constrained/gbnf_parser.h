// gbnf_parser.h — grammar text (GBNF, the EBNF dialect llama.cpp reads) to a Grammar.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
//   root  ::= "yes" | "no" ws item*      # rules, alternatives, comments
//   item  ::= [a-z0-9_]+ ("," [^\n]?){0,3}
// Rule names are [a-zA-Z0-9_-]+. Literals "..." with the escapes \n \r \t
// \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH; character classes [...] and
// [^...] with ranges, over Unicode code points (matched as UTF-8,
// utf8_ranges.h); `.` (any character, newline included); groups; and the
// repetitions * + ? {m} {m,} {m,n}. A rule ends at the end of its line,
// except inside parentheses, after `|` or `::=`, and where the next line
// starts with `|`. Repetitions become right-recursive helper rules
// (rule_draft.h), so the matcher's stacks stay short; helpers are named
// after their rule ("item-loop", "item-tail-1", ...), never taking a name
// the text uses.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "reference/constrained/grammar.h"

namespace servelab {

inline constexpr int kMaxGbnfRepetition = 10000;
// The most elements (grammar.h: symbols plus alternative ends) a grammar
// may grow to once its repetitions are unrolled.
inline constexpr size_t kMaxGbnfElements = size_t(1) << 18;

// Throws GrammarError "grammar line L column C: <what>" for a syntax error,
// a rule defined twice, an undefined rule (where it is first used), left
// recursion (at the reference that closes the cycle, naming the rules in
// it), an unbounded repetition of an item that can match "", a repetition
// count over kMaxGbnfRepetition, a grammar over kMaxGbnfElements, or a
// missing `root` (reported at line 1 column 1).
Grammar parse_gbnf(std::string_view text, const std::string& root = "root");

// Adds the rules of `text` to `builder` (names kept; the text may use rules
// the builder already has, but not define one again), without building:
// only the syntax and the repetitions are checked here, and undefined rules
// and left recursion are left to GrammarBuilder::build, which names them
// without a position.
void add_gbnf_rules(GrammarBuilder& builder, std::string_view text);

}  // namespace servelab
