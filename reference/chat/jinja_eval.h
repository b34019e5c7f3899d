// jinja_eval.h — run a parsed chat template: statements write text, expressions compute values.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// Variables live in scopes as jinja2's do: the template's top level holds
// the globals and every {% set %} outside a loop; each iteration of a
// {% for %} gets a fresh scope for its loop variable, `loop` and its own
// {% set %}s, which therefore vanish when the iteration ends. ({% if %}
// opens no scope.) That is why templates carry state across iterations in
// a namespace(...), the one value that changes in place.
#pragma once

#include <string>

#include "reference/chat/jinja_parser.h"
#include "reference/chat/jinja_value.h"

namespace servelab::jinja {

// Renders `tmpl` with `globals` as its top-level variables. Throws
// TemplateError naming the line and column of a runtime error (an undefined
// value used in arithmetic, a type error, the template's raise_exception(),
// a spent Budget or output over Budget::kMaxStringBytes).
std::string render_template(const Template& tmpl, Dict globals);

}  // namespace servelab::jinja
