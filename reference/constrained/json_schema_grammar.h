// json_schema_grammar.h — a JSON Schema as grammar rules: the JSON texts that validate.
//
// Lab 12 (chapter 11.6, constrained decoding); the rules for objects and
// arrays are the lab's exercise (json_schema_objects.cpp). Keywords: type
// (one or a list), properties, required, additionalProperties (false, true,
// or a schema), enum, const, anyOf, oneOf, allOf, items / prefixItems (and
// the older items-as-a-list with additionalItems), minItems / maxItems,
// minLength / maxLength, pattern (regex_grammar.h), format (date, time,
// date-time, email, uuid, uri), minimum / maximum / exclusiveMinimum /
// exclusiveMaximum for integers (draft 4's boolean exclusives too), $ref to
// any "#/..." pointer ("#", "#/$defs/x", "#/definitions/x"; recursion
// included, one rule per definition, built once). Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, ...) and words JSON Schema does not define are
// ignored, as validators ignore them.
//
// The promise: every text the grammar allows validates against the schema.
// The grammar may allow less than the schema; where, is chosen and listed:
//   - Properties come in the schema's order, each required one always, each
//     optional one or not at all; extra properties (allowed unless
//     additionalProperties is false, JSON Schema's default being true) come
//     after the listed ones, and start with a character no listed name
//     starts with, so as never to be one (tracking whole names would make
//     the mask cache walk the vocabulary once per character of every name).
//     Duplicate extra names are not prevented. OpenAI's strict mode
//     asks for additionalProperties: false on every object; without it a
//     small model may well add properties.
//   - Whitespace: none, one space, or one newline and up to 20 spaces or
//     tabs, after a token; nothing before or after the value.
//   - A schema without `type` whose keywords are all of one kind (say
//     properties) stands for that kind only, not for every other type too.
//   - Strings: UTF-8 characters and every escape (\" \\ \/ \b \f \n \r \t,
//     \uXXXX, surrogate pairs as one character); never a lone surrogate.
//     minLength / maxLength count characters, an escape as one. A string
//     under pattern or format is written without escapes.
//   - Integers are written without fraction or exponent; enum and const
//     values as nlohmann's compact dump writes them.
//   - oneOf is built as anyOf, and accepted only when no value can match two
//     branches (different types, different listed values, or a required
//     discriminator property with different values; json_schema_one_of.cpp).
//   - allOf, and keywords beside $ref or anyOf, are merged into one schema
//     (json_schema_all_of.cpp); parts that cannot be merged are refused.
//
// A keyword the grammar cannot enforce (multipleOf, a minimum on a number
// that may have a fraction, uniqueItems, not, if/then/else,
// patternProperties, propertyNames, min/maxProperties, contains, dependent*,
// unevaluated*, $dynamicRef, a remote $ref, an unknown format, pattern or
// format together with a length, a keyword beside enum/const, overlapping
// oneOf) throws SchemaError naming it: a request is refused, never quietly
// relaxed. So do bounded-work limits (json_schema_converter.h: nesting
// depth 64, 100,000 rules, lengths and item counts up to 10,000, enums of
// 4,096 values) and a schema that validates nothing.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "reference/constrained/grammar.h"

namespace servelab {

// A schema the converter cannot honour; keyword() names what to blame, as
// dotted keywords from the root ("properties.age.multipleOf"; "" for the
// schema as a whole). The message is one line.
class SchemaError : public GrammarError {
  public:
    SchemaError(const std::string& message, std::string keyword)
        : GrammarError(message), keyword_(std::move(keyword)) {}
    const std::string& keyword() const { return keyword_; }

  private:
    std::string keyword_;
};

// A new rule (named `hint`, or `hint-1`, ... when taken) matching the JSON
// texts that `schema` validates (within the subset above). Properties come
// in the order of the ordered_json; a nlohmann::json converts to one, but
// has already sorted them by name, so parse requests as ordered_json.
int32_t add_json_schema_rule(GrammarBuilder& builder, const nlohmann::ordered_json& schema,
                             const std::string& hint);
// A grammar whose root matches the JSON texts that `schema` validates.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema);
// Any JSON object (response_format {"type": "json_object"}), with the same
// bounded whitespace.
Grammar json_object_grammar();

}  // namespace servelab
