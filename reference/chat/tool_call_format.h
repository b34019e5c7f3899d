// tool_call_format.h — how a model writes a tool call, and how servelab tells which way it does.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling;
// constrained decoding, Lab 12 / chapter 11.6, enforces it). A model asked to call a
// function answers with text in the format it was trained on, which its chat template
// shows it (the template renders the history's calls in that very format):
//   kHermes     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//               one block per call, after any text (Qwen2.5, Hermes, and the many
//               templates that copied them);
//   kLlama3Json {"name": "f", "parameters": {...}}   the whole answer, optionally
//               after <|python_tag|>; several calls joined by "; " (Llama 3.1-3.3);
//   kMistral    [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]   after any
//               text ([TOOL_CALLS] is a control token: Mistral 7B v0.3, Nemo, Small).
// The format is read from the template's source text (detect_tool_call_format);
// a template that shows none cannot be given tools.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace servelab {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

// "none", "hermes", "llama3_json", "mistral" (vLLM's parser names).
std::string_view tool_call_format_name(ToolCallFormat format);

// The format a chat template shows, by the first rule that matches its source:
//   contains "<tool_call>"                                  → kHermes
//   contains "[TOOL_CALLS]"                                 → kMistral
//   contains "<|start_header_id|>" and "\"parameters\""     → kLlama3Json
//   otherwise                                               → kNone
// (A template renders the history's calls in the format it expects back, so
// the marker of that format is in its text; Llama's has no marker of its
// own but names the "parameters" key in its call format.)
ToolCallFormat detect_tool_call_format(std::string_view template_source);

// What a format's calls look like, spelled out so that a grammar can force
// them (tool_choice "required" or a named function). Every call is the JSON
// object
//     {"<name_key>": "<function name>", "<arguments_key>": <arguments object>}
// (keys in that order, ", " and ": " between, as the templates render calls),
// and a whole answer of calls N >= 1 is
//     calls_begin  call_begin CALL call_end  (call_separator call_begin CALL call_end)*  calls_end
// with N = 1 when parallel_tool_calls is false. Text before calls_begin is
// the message's content when content_before_calls; a grammar that forces
// calls starts at calls_begin. The parser (tool_call_parser.h) accepts this
// exact form and some slack around it (spaces, a missing optional marker).
struct ToolCallSyntax {
    std::string calls_begin;            // before the first call
    std::string call_begin;             // before each call
    std::string call_end;               // after each call
    std::string call_separator;         // between two calls (after call_end, before call_begin)
    std::string calls_end;              // after the last call
    std::string name_key;               // "name"
    std::string arguments_key;          // "arguments" or "parameters"
    bool content_before_calls = false;  // text may come first (its content)
    // Texts that start a call in the output, for a stream to hold back from
    // the first of them on. With starts_at_beginning, they count only at the
    // start of the output (after whitespace), and the answer is calls only.
    std::vector<std::string> call_markers;
    bool starts_at_beginning = false;
    // Markers that are control tokens in a model's vocabulary (Mistral's
    // [TOOL_CALLS], Llama's <|python_tag|>): decoding drops their text, so
    // the server puts it back where the token was before parsing.
    std::vector<std::string> control_markers;
};

// The syntax of `format` (every field empty for kNone):
//   kHermes:     "" / "<tool_call>\n" / "\n</tool_call>" / "\n" / "";  name, arguments
//   kLlama3Json: "" / "" / "" / "; " / "";                              name, parameters
//   kMistral:    "[TOOL_CALLS][" / "" / "" / ", " / "]";                name, arguments
ToolCallSyntax tool_call_syntax(ToolCallFormat format);

}  // namespace servelab
