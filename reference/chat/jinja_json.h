// jinja_json.h — JSON a request carries, as the values a chat template reads.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// Hugging Face's apply_chat_template hands a template Python objects that
// came from JSON: the request's tools, each tool call's arguments (parsed
// from their JSON text, as vLLM and Hugging Face do) and the
// chat_template_kwargs. json.loads makes dicts in the document's key order,
// and a template that prints them with tojson prints that order, so the JSON
// here is nlohmann::ordered_json (nlohmann::json sorts keys).
#pragma once

#include <nlohmann/json.hpp>

#include "reference/chat/jinja_value.h"

namespace servelab::jinja {

// null → None, true/false → bool, integers → int, other numbers → float,
// strings → str, arrays → list, objects → dict (keys in order). Throws
// servelab::Error for an integer outside int64 or nesting deeper than
// Value::kMaxDepth.
Value from_json(const nlohmann::ordered_json& json);

}  // namespace servelab::jinja
