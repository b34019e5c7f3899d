// tool_call_grammar.h — the grammar of an answer that is nothing but tool calls.
//
// Lab 12 support (chapter 11.6, constrained decoding; chapter 11, serving:
// tool calling); not an exercise. tool_choice "required" and a named
// function promise the client calls whose arguments validate against each
// function's parameters schema. A model only usually writes those; a grammar
// makes it always: the format's own text around the calls
// (tool_call_syntax), each call's JSON object with the name as a literal and
// the arguments as the JSON schema's rules (json_schema_grammar.h).
// Mistral's [TOOL_CALLS] is a control token, which a grammar over text
// never samples: the forced answer spells it as text, which the parser
// reads the same.
#pragma once

#include <string>

#include "reference/chat/tool_call_format.h"
#include "reference/chat/tool_request.h"
#include "reference/constrained/grammar.h"

namespace servelab {

// The answers of 1 to tools.max_calls() calls in `syntax`'s format, to any
// of tools.functions (kRequired) or to tools.chosen_function (kNamed).
// Throws SchemaError (json_schema_grammar.h) when a function's parameters
// cannot be enforced, the message naming the function.
Grammar tool_call_grammar(const ToolRequest& tools, const ToolCallSyntax& syntax);

// What identifies that grammar, for the grammar cache: equal keys, equal grammars.
std::string tool_call_grammar_key(const ToolRequest& tools);

}  // namespace servelab
