// json_schema_grammar.h — a JSON Schema as grammar rules: the JSON texts that validate.
//
// Lab 12 (chapter 11.6, constrained decoding); the rules for objects and
// arrays are the lab's exercise. Keywords: type (one or a list), properties,
// required, additionalProperties (false, true, or a schema), enum, const,
// anyOf / oneOf, allOf of objects, items / prefixItems, minItems / maxItems,
// minLength / maxLength, pattern (regex_grammar.h), format (date, time,
// date-time, email, uuid), minimum / maximum / exclusiveMinimum /
// exclusiveMaximum for integers, $ref to #/$defs/... and #/definitions/...
// (recursion included), and the annotations that constrain nothing (title,
// description, default, examples, $schema, $id, $comment).
//
// A keyword the grammar cannot enforce (multipleOf, a number's minimum,
// uniqueItems, not, if/then/else, patternProperties, ...) throws
// SchemaError naming it: a request is refused, never quietly relaxed.
// Properties come out in the schema's order (pass an ordered_json: a
// nlohmann::json converts, but has already sorted them by name); whitespace
// is limited (a model's runaway newlines are not valid output).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "reference/constrained/grammar.h"

namespace servelab {

// A schema the converter cannot honour; keyword() names what to blame
// ("properties.age.multipleOf").
class SchemaError : public GrammarError {
  public:
    SchemaError(const std::string& message, std::string keyword)
        : GrammarError(message), keyword_(std::move(keyword)) {}
    const std::string& keyword() const { return keyword_; }

  private:
    std::string keyword_;
};

// A new rule (named after `hint`) matching the JSON texts that `schema` validates.
int32_t add_json_schema_rule(GrammarBuilder& builder, const nlohmann::ordered_json& schema,
                             const std::string& hint);
// A grammar whose root matches the JSON texts that `schema` validates.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema);
// Any JSON object (response_format {"type": "json_object"}).
Grammar json_object_grammar();

}  // namespace servelab
