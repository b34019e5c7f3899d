// json_schema_keywords.cpp — which JSON Schema keywords are enforced,
// refused or ignored, and the readers of the keywords several files share.
//
// Lab 12 (chapter 11.6, constrained decoding); support, not the exercise.
// Three kinds of keyword: those the grammar enforces (kEnforcedKeywords);
// those that constrain a value but that no grammar here can enforce
// (kRefusedKeywords: a schema using one is refused with its path, never
// quietly relaxed); and all others — annotations (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly, $defs, ...) and words JSON Schema does not define — which
// validators ignore, and so do we.
#include <fmt/format.h>

#include <cmath>
#include <set>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

// Keywords of JSON Schema (drafts 3 to 2020-12) that constrain a value but
// that this converter cannot turn into grammar rules.
// clang-format off
const std::set<std::string> kRefusedKeywords = {
    "multipleOf", "divisibleBy", "uniqueItems", "not", "if", "then", "else",
    "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "contains", "minContains",
    "maxContains", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
    "$recursiveRef", "extends", "disallow"};

// Keywords enforced here.
const std::set<std::string> kEnforcedKeywords = {
    "$ref", "type", "enum", "const", "anyOf", "oneOf", "allOf", "properties", "required",
    "additionalProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum"};
// clang-format on

const char* const kTypeNames[] = {"null", "boolean", "object", "array", "string", "integer"};
const uint8_t kTypeNameBits[] = {kNullType,  kBooleanType, kObjectType,
                                 kArrayType, kStringType,  kIntegerType};

// A keyword that would refuse but is set to its no-op value.
bool is_no_op(const std::string& keyword, const json& value) {
    return (keyword == "uniqueItems" && value == false) ||
           (keyword == "minProperties" && value == 0);
}

}  // namespace

void throw_schema_error(const std::string& keyword_path, const std::string& what) {
    throw SchemaError(
        fmt::format("JSON schema{}: {}", keyword_path.empty() ? "" : " at " + keyword_path, what),
        keyword_path);
}

std::string child_path(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
}

std::optional<int64_t> count_keyword(const json& schema, const char* keyword,
                                     const std::string& path) {
    if (!schema.contains(keyword)) return std::nullopt;
    const json& value = schema[keyword];
    const std::string where = child_path(path, keyword);
    const bool integral =
        value.is_number_integer() ||
        (value.is_number_float() && value.get<double>() == double(int64_t(value.get<double>())));
    if (!value.is_number() || !integral || value < 0) {
        throw_schema_error(where, fmt::format("'{}' must be a non-negative integer", keyword));
    }
    if (value > kMaxSchemaRepetition) {
        throw_schema_error(where, fmt::format("'{}' {} is over the limit of {}", keyword,
                                              value.dump(), kMaxSchemaRepetition));
    }
    return value.is_number_float() ? int64_t(value.get<double>()) : value.get<int64_t>();
}

bool is_constraining_keyword(const std::string& keyword) {
    return kEnforcedKeywords.count(keyword) || kRefusedKeywords.count(keyword);
}

void check_schema_keywords(const json& schema, const std::string& path) {
    for (const auto& [keyword, value] : schema.items()) {
        if (kRefusedKeywords.count(keyword) && !is_no_op(keyword, value)) {
            throw_schema_error(
                child_path(path, keyword),
                fmt::format("'{}' is not supported: the grammar cannot enforce it", keyword));
        }
    }
}

uint8_t value_type_bit(const json& value) {
    switch (value.type()) {
        case json::value_t::null:
            return kNullType;
        case json::value_t::boolean:
            return kBooleanType;
        case json::value_t::object:
            return kObjectType;
        case json::value_t::array:
            return kArrayType;
        case json::value_t::string:
            return kStringType;
        case json::value_t::number_float: {
            const double x = value.get<double>();
            return x == std::floor(x) ? kIntegerType : kFractionType;
        }
        default:
            return kIntegerType;
    }
}

uint8_t type_keyword_bits(const json& schema, const std::string& path) {
    if (!schema.contains("type")) return kAnyType;
    const json& type = schema["type"];
    const json names = type.is_array() ? type : json::array({type});
    uint8_t bits = 0;
    for (const json& name : names) {
        bool known = false;
        for (size_t i = 0; i < std::size(kTypeNames); ++i) {
            if (name == kTypeNames[i]) bits |= kTypeNameBits[i], known = true;
        }
        if (name == "number") bits |= kNumberType, known = true;
        if (!known) {
            throw_schema_error(child_path(path, "type"),
                               fmt::format("unknown type {}", name.dump()));
        }
    }
    return bits;
}

}  // namespace servelab
