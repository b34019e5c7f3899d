// json_schema_one_of.cpp — when oneOf may be built as anyOf: no value can
// validate against two of its branches.
//
// Lab 12 (chapter 11.6, constrained decoding); support, not the exercise.
// oneOf asks for exactly one matching branch. A grammar can offer every
// branch (anyOf) but cannot forbid a value that two of them match, so
// oneOf is accepted only with a proof that they never overlap, and refused
// otherwise (anyOf says what the writer likely meant). The proofs, for each
// pair of branches, are the three ways real schemas keep branches apart:
//   - they allow no type in common ("type": "string" and "type": "integer");
//   - both list their values (enum / const) and share none;
//   - both are objects only, and both require a property whose values they
//     list and do not share (a discriminator: {"kind": {"const": "cat"}}).
// The checks look through $ref, allOf (types), anyOf and oneOf (types), and
// err on the side of "may overlap".
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxLookDepth = 16;  // $ref chains followed; deeper means "any type"
// Subschemas looked at for one oneOf, in all: past this (a hostile web of
// $refs and anyOfs), every type is possible, so branches may overlap.
constexpr int64_t kMaxLooks = 100000;

// `schema` with its $ref followed (to a bounded depth).
const json& followed(const JsonSchemaConverter& converter, const json& schema,
                     const std::string& path) {
    const json* s = &schema;
    for (int k = 0; k < kMaxLookDepth && s->is_object() && s->contains("$ref"); ++k) {
        s = &converter.resolve_ref((*s)["$ref"], path);
    }
    return *s;
}

// The types a value validating against `schema` may have (never too few).
uint8_t possible_types(const JsonSchemaConverter& converter, const json& schema,
                       const std::string& path, int depth, int64_t& looks_left) {
    if (schema.is_boolean()) return schema.get<bool>() ? kAnyType : 0;
    if (!schema.is_object() || depth > kMaxLookDepth || --looks_left < 0) return kAnyType;
    uint8_t bits = type_keyword_bits(schema, path);
    if (schema.contains("$ref")) {
        bits &= possible_types(converter, converter.resolve_ref(schema["$ref"], path), path,
                               depth + 1, looks_left);
    }
    for (const char* keyword : {"enum", "const"}) {
        if (!schema.contains(keyword)) continue;
        const json values =
            keyword == std::string("enum") ? schema[keyword] : json::array({schema[keyword]});
        if (!values.is_array()) continue;
        uint8_t value_bits = 0;
        for (const json& v : values) value_bits |= value_type_bit(v);
        bits &= value_bits;
    }
    if (schema.contains("allOf") && schema["allOf"].is_array()) {
        for (const json& part : schema["allOf"]) {
            bits &= possible_types(converter, part, path, depth + 1, looks_left);
        }
    }
    for (const char* keyword : {"anyOf", "oneOf"}) {
        if (!schema.contains(keyword) || !schema[keyword].is_array()) continue;
        uint8_t union_bits = 0;
        for (const json& branch : schema[keyword]) {
            union_bits |= possible_types(converter, branch, path, depth + 1, looks_left);
        }
        bits &= union_bits;
    }
    return bits;
}

// The values `schema` lists (enum, const), if it lists them.
std::optional<json> listed_values(const JsonSchemaConverter& converter, const json& schema,
                                  const std::string& path) {
    const json& s = followed(converter, schema, path);
    if (!s.is_object()) return std::nullopt;
    if (s.contains("const")) return json::array({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) return s["enum"];
    return std::nullopt;
}

bool share_a_value(const json& a, const json& b) {
    for (const json& v : a) {
        if (std::find(b.begin(), b.end(), v) != b.end()) return true;
    }
    return false;
}

// A property both require and list values for, with no value in common.
bool have_discriminator(const JsonSchemaConverter& converter, const json& a, const json& b,
                        const std::string& path) {
    const json& x = followed(converter, a, path);
    const json& y = followed(converter, b, path);
    if (!x.is_object() || !y.is_object()) return false;
    const json required_x = x.value("required", json::array());
    const json required_y = y.value("required", json::array());
    const json properties_x = x.value("properties", json::object());
    const json properties_y = y.value("properties", json::object());
    for (const json& name : required_x) {
        if (!name.is_string() || !share_a_value(json::array({name}), required_y)) continue;
        const std::string key = name.get<std::string>();
        if (!properties_x.contains(key) || !properties_y.contains(key)) continue;
        const std::optional<json> vx = listed_values(converter, properties_x[key], path);
        const std::optional<json> vy = listed_values(converter, properties_y[key], path);
        if (vx && vy && !share_a_value(*vx, *vy)) return true;
    }
    return false;
}

bool disjoint(const JsonSchemaConverter& converter, const json& a, const json& b,
              const std::string& path, int64_t& looks_left) {
    const uint8_t common = possible_types(converter, a, path, 0, looks_left) &
                           possible_types(converter, b, path, 0, looks_left);
    if (common == 0) return true;
    const std::optional<json> va = listed_values(converter, a, path);
    const std::optional<json> vb = listed_values(converter, b, path);
    if (va && vb && !share_a_value(*va, *vb)) return true;
    return common == kObjectType && have_discriminator(converter, a, b, path);
}

}  // namespace

void require_disjoint_branches(const JsonSchemaConverter& converter, const json& branches,
                               const std::string& path) {
    if (!branches.is_array() || branches.empty()) {
        throw_schema_error(path, "must be a non-empty array of schemas");
    }
    if (branches.size() > kMaxSchemaAlternatives) {
        throw_schema_error(path, fmt::format("{} branches is over the limit of {}", branches.size(),
                                             kMaxSchemaAlternatives));
    }
    int64_t looks_left = kMaxLooks;
    for (size_t i = 0; i < branches.size(); ++i) {
        for (size_t j = i + 1; j < branches.size(); ++j) {
            if (disjoint(converter, branches[i], branches[j], path, looks_left)) continue;
            throw_schema_error(
                path, fmt::format("branches {} and {} may both match a value, which oneOf "
                                  "forbids and a grammar cannot rule out (anyOf allows it)",
                                  i, j));
        }
    }
}

}  // namespace servelab
