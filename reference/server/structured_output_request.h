// structured_output_request.h — the request fields that constrain the output, in the spellings
// clients send.
//
// Lab 12 support (chapter 11.6, constrained decoding; chapter 11.7, serving);
// not an exercise. Three APIs spell "the output must match this":
//   OpenAI     response_format: {"type": "text" | "json_object" |
//              "json_schema", "json_schema": {"name", "schema", "strict"}}
//   vLLM       structured_outputs: {"json" | "regex" | "choice" | "grammar":
//              ..., or "json_object": true}
//   llama.cpp  json_schema: {...}, grammar: "GBNF text"
// Each becomes one ConstraintSpec, which RequestBuilder compiles. A request
// may use one of them; two are a 400 (which would win is not obvious).
// Whether the constraint can be enforced (a schema keyword we cannot honour)
// is decided when it is compiled, also a 400 naming the keyword.
#pragma once

#include <nlohmann/json.hpp>

#include "reference/constrained/constraint_spec.h"

namespace servelab {

// The body's constraint (kNone when it asks for none). Throws ApiException
// (400) naming the field for a malformed one.
// The body is read with its keys in the client's order: a schema's
// properties come out in that order (json_schema_grammar.h).
ConstraintSpec parse_constraint(const nlohmann::ordered_json& body);

// OpenAI's strict mode (response_format json_schema, "strict": true): every
// object lists all its properties in `required` and sets
// additionalProperties false, as OpenAI's structured outputs demand. Throws
// ApiException naming the first object that does not, by its path.
void check_strict_schema(const nlohmann::ordered_json& schema);

}  // namespace servelab
