// tool_request.h — the tools a chat request offers the model, and what it asks of them.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: tool calling;
// Lab 12 / chapter 11.6 enforces the calls with a grammar). The server fills it from
// the request's tools, tool_choice and parallel_tool_calls (reference/server/chat_request.h,
// which checks every field); RequestBuilder::build (the one front door) refuses it for a
// model whose chat template shows no tool-call format and otherwise sets `format`, and the
// EngineRequest carries it on to the response (reference/server/tool_call_response.h).
//   tools        the template renders them (as the request wrote them);
//   tool_choice  "none": rendered, but the answer is never read as calls;
//                "auto": the model decides, the answer is parsed;
//                "required": it must call one or more (parallel_tool_calls) of them;
//                {"type": "function", "function": {"name": f}}: it must call f.
// Only a grammar makes "required" and a named choice hold: build it from
// tool_call_syntax(format) (the text around calls, the JSON keys) and each
// function's parameters schema.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "reference/chat/tool_call_format.h"

namespace servelab {

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// One offered function ("type": "function" is the only kind there is).
struct ToolFunction {
    std::string name;         // [A-Za-z0-9_-]{1,64}, unique in the request
    std::string description;  // "" when not given
    // A JSON Schema of the arguments object; {"type": "object",
    // "properties": {}} when not given (a function of no arguments).
    nlohmann::ordered_json parameters;
    bool strict = false;  // OpenAI's "strict": the arguments must match the schema exactly
};

struct ToolRequest {
    // The request's "tools" as it wrote them (key order kept: the template
    // prints them); an empty list when it gave none.
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();
    std::vector<ToolFunction> functions;    // the same, read
    ToolChoice choice = ToolChoice::kNone;  // "auto" when tools are given without a choice
    std::string chosen_function;            // kNamed: one of functions' names
    bool parallel_tool_calls = true;        // false: at most one call
    // The model's format, from its chat template (set by RequestBuilder::build).
    ToolCallFormat format = ToolCallFormat::kNone;

    bool has_tools() const { return !functions.empty(); }
    // Whether the answer is read back as calls (tools given, choice not "none").
    bool parses_calls() const { return has_tools() && choice != ToolChoice::kNone; }
    // Whether the answer must be calls: what a grammar enforces.
    bool requires_calls() const {
        return has_tools() && (choice == ToolChoice::kRequired || choice == ToolChoice::kNamed);
    }
    // The most calls one answer may hold.
    size_t max_calls() const {
        return parallel_tool_calls && choice != ToolChoice::kNamed
                   ? std::numeric_limits<size_t>::max()
                   : 1;
    }
};

}  // namespace servelab
