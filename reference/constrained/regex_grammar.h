// regex_grammar.h — a regular expression, and a list of choices, as grammar rules.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise. The
// regex must match the whole output (Python's re.fullmatch; a leading ^ and
// trailing $ are allowed and mean the same). Supported: literals and
// escapes, . [...] [^...] \d \w \s \D \W \S, groups ( ) (?: ) and named
// groups (?P<name> ) (?<name> ), alternation, * + ? {m} {m,} {m,n} and their
// lazy forms (laziness cannot matter to a whole-output match). Anything else
// (backreferences, lookaround, inline flags, anchors inside) throws
// GrammarError naming the construct, never matched loosely.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "reference/constrained/grammar.h"

namespace servelab {

// A new rule (named after `hint`) matching exactly the strings of `pattern`.
int32_t add_regex_rule(GrammarBuilder& builder, std::string_view pattern, const std::string& hint);
// A grammar whose root matches exactly the strings of `pattern`.
Grammar regex_grammar(std::string_view pattern);
// A grammar whose root matches exactly one of `choices` (vLLM's structured
// output "choice"). Throws GrammarError when the list is empty.
Grammar choice_grammar(const std::vector<std::string>& choices);

}  // namespace servelab
