// json_schema_converter.h — one JSON-Schema-to-grammar conversion in progress:
// the builder, the root document (for $ref), the shared rules, the limits.
//
// Lab 12 (chapter 11.6, constrained decoding). Internal to the
// json_schema_*.cpp files; the public interface is json_schema_grammar.h.
// The work is split by JSON type, one file each:
//   json_schema_grammar.cpp  dispatch: booleans, $ref, anyOf/oneOf, enum/const, type
//   json_schema_keywords.cpp which keywords are enforced, refused, ignored
//   json_schema_any.cpp      any JSON value, and the whitespace between tokens
//   json_schema_all_of.cpp   allOf (and siblings of $ref / anyOf) merged into one schema
//   json_schema_one_of.cpp   the proof that oneOf's branches cannot both match
//   json_schema_objects.cpp  objects and arrays (Lab 12's exercise)
//   json_schema_strings.cpp  strings: characters, lengths, pattern, property names
//   json_schema_formats.cpp  format: date, time, date-time, email, uuid
//   json_schema_numbers.cpp  numbers, and integers in a range
//
// Every *_rule function returns a rule id, or kNoValue when the schema
// validates nothing (false, an empty enum, minItems > maxItems, ...): the
// caller drops that branch or optional property, or is itself kNoValue.
// `path` names where a schema sits, as dotted keywords
// ("properties.age.items"), for SchemaError and for rule names.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/constrained/grammar.h"
#include "reference/constrained/json_schema_grammar.h"

namespace servelab {

// Bounds on the work a hostile schema can cause (SchemaError past them).
inline constexpr int kMaxSchemaDepth = 64;              // nested subschemas
inline constexpr size_t kMaxSchemaRules = 100000;       // rules in the grammar
inline constexpr int64_t kMaxSchemaRepetition = 10000;  // min/maxLength, min/maxItems
inline constexpr size_t kMaxEnumValues = 4096;
inline constexpr size_t kMaxEnumBytes = 256 * 1024;    // serialized, per enum
inline constexpr size_t kMaxSchemaAlternatives = 256;  // anyOf branches after merging allOf

// Whitespace between tokens: none, one space, or a newline and up to this
// many spaces or tabs (indentation); never blank lines or runs of spaces.
inline constexpr int kMaxIndentBytes = 20;

// "This schema validates no JSON value."
inline constexpr int32_t kNoValue = -1;

using GrammarSymbols = std::vector<GrammarSymbol>;

// Spelling alternatives: lit("{") + ref(ws) + ref(members) + lit("}").
inline GrammarSymbols lit(std::string_view bytes) {
    return literal_symbols(bytes);
}
inline GrammarSymbols ref(int32_t rule) {
    return {GrammarSymbol::of_rule(rule)};
}
inline GrammarSymbols bytes_of(const ByteSet& set) {
    return {GrammarSymbol::of_bytes(set)};
}
inline GrammarSymbols operator+(GrammarSymbols a, const GrammarSymbols& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// "properties.age" + "items" = "properties.age.items" (the root is "").
std::string child_path(const std::string& path, const std::string& key);

// A non-negative integer keyword (minLength, maxItems, ...) if present, at
// most kMaxSchemaRepetition; SchemaError otherwise.
std::optional<int64_t> count_keyword(const nlohmann::ordered_json& schema, const char* keyword,
                                     const std::string& path);

// `text` as a JSON string literal, as nlohmann dumps it (SchemaError at
// `path` when it is not valid UTF-8).
std::string json_string_literal(const std::string& text, const std::string& path);

[[noreturn]] void throw_schema_error(const std::string& keyword_path, const std::string& what);

class JsonSchemaConverter {
  public:
    JsonSchemaConverter(GrammarBuilder& builder, const nlohmann::ordered_json& root);

    // The JSON texts `schema` validates (json_schema_grammar.cpp).
    int32_t value_rule(const nlohmann::ordered_json& schema, const std::string& path);

    // By type, `schema` already known to allow that type.
    int32_t object_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t array_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t string_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t number_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t integer_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t format_rule(const std::string& format, const std::string& path);

    // A JSON string, quotes included, whose value is none of `names` (the
    // name of an object's extra property): one that starts with a character
    // none of them starts with (json_schema_strings.cpp says why).
    int32_t extra_key_rule(const std::vector<std::string>& names, const std::string& path);

    // The schema a local $ref points to ("#", "#/$defs/x", any "#/..." pointer).
    const nlohmann::ordered_json& resolve_ref(const nlohmann::ordered_json& ref,
                                              const std::string& path) const;

    // Shared rules, each built on first use.
    int32_t whitespace();   // see kMaxIndentBytes
    int32_t any_value();    // any JSON value
    int32_t any_string();   // any JSON string, quotes included
    int32_t string_char();  // one character of a JSON string, escaped or not
    int32_t any_number();

    // A new rule named after `path` (suffixed by `what`) with these
    // alternatives; SchemaError past kMaxSchemaRules.
    int32_t new_rule(const std::string& path, const std::string& what,
                     const std::vector<GrammarSymbols>& alternatives);
    // The same, named `name` (or "name-1", ... when taken).
    int32_t named_rule(const std::string& name, const std::vector<GrammarSymbols>& alternatives,
                       const std::string& path = "");
    // The name a rule for `path` gets ("root", "address.street").
    static std::string rule_name(const std::string& path, const std::string& what);
    // SchemaError when the builder has grown past kMaxSchemaRules.
    void check_rule_count(const std::string& path) const;

    GrammarBuilder& builder() { return builder_; }

  private:
    int32_t ref_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t typed_value_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t enum_rule(const nlohmann::ordered_json& schema, const std::string& path);
    int32_t any_of_rule(const nlohmann::ordered_json& branches, const std::string& path);
    int32_t any_object();
    int32_t any_array();

    GrammarBuilder& builder_;
    const nlohmann::ordered_json& root_;
    int depth_ = 0;
    std::map<std::string, int32_t> ref_rules_;  // by JSON pointer: one rule per definition
    std::map<std::string, int32_t> shared_;     // by name: ws, any-value, ...
};

// allOf as one schema (json_schema_all_of.cpp): properties and required
// merged, types intersected, bounds tightened; an anyOf/oneOf among the
// parts distributed over the others ({"anyOf": [merged, ...]}); false when
// the parts cannot all hold. SchemaError for keywords it cannot merge.
nlohmann::ordered_json merge_all_of(const JsonSchemaConverter& converter,
                                    const std::vector<nlohmann::ordered_json>& parts,
                                    const std::string& path);

// Throws SchemaError unless no JSON value can validate against two of
// `branches` (json_schema_one_of.cpp): then oneOf is anyOf.
void require_disjoint_branches(const JsonSchemaConverter& converter,
                               const nlohmann::ordered_json& branches, const std::string& path);

// The JSON types, as a bit set (json_schema_grammar.cpp).
enum JsonTypeBit : uint8_t {
    kNullType = 1,
    kBooleanType = 2,
    kObjectType = 4,
    kArrayType = 8,
    kStringType = 16,
    kIntegerType = 32,   // numbers with an integer value (1 and 1.0)
    kFractionType = 64,  // numbers that are not integers
    kNumberType = kIntegerType | kFractionType,
    kAnyType = 127,
};
// The types the `type` keyword allows (kAnyType when absent).
uint8_t type_keyword_bits(const nlohmann::ordered_json& schema, const std::string& path);
// The type bit of one JSON value.
uint8_t value_type_bit(const nlohmann::ordered_json& value);

// Keywords this converter enforces; others are refused (see
// check_schema_keywords) or, as annotations, ignored.
void check_schema_keywords(const nlohmann::ordered_json& schema, const std::string& path);
bool is_constraining_keyword(const std::string& keyword);

}  // namespace servelab
