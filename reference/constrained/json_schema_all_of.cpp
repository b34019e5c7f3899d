// json_schema_all_of.cpp — allOf, and keywords beside $ref or anyOf, merged
// into one schema the grammar can be built from.
//
// Lab 12 (chapter 11.6, constrained decoding); support, not the exercise.
// A grammar cannot intersect two languages in general, but the schemas
// people write (a base object extended with more properties, a $ref with a
// description and a tighter bound) merge keyword by keyword, exactly:
//   type                    the types all parts allow
//   enum / const            the values all parts list
//   properties              every part's names; a name's schema is the allOf
//                           of what each part says of it (its properties entry,
//                           else its additionalProperties, else nothing)
//   additionalProperties    the allOf of the parts' (a name none lists must
//                           satisfy them all)
//   required                the union
//   prefixItems / items     as properties / additionalProperties, by position
//   minimum, minLength, minItems, ...     the tightest
//   pattern, format         must be the same in every part that has one
// A part with anyOf (or oneOf, once its branches are shown disjoint) is
// distributed: allOf[A, anyOf[B, C]] = anyOf[allOf[A, B], allOf[A, C]].
// Anything else is refused with the keyword's path.
#include <fmt/format.h>

#include <algorithm>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

const char* const kLowerBounds[] = {"minimum", "exclusiveMinimum", "minLength", "minItems"};
const char* const kUpperBounds[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems"};

json all_of(const std::vector<json>& schemas) {
    if (schemas.empty()) return json(true);
    if (schemas.size() == 1) return schemas[0];
    return json{{"allOf", schemas}};
}

// Draft 4's boolean exclusiveMinimum / exclusiveMaximum in the later form.
void normalize_draft4_bounds(json& schema) {
    for (const auto& [exclusive, inclusive] :
         {std::pair{"exclusiveMinimum", "minimum"}, std::pair{"exclusiveMaximum", "maximum"}}) {
        if (!schema.contains(exclusive) || !schema[exclusive].is_boolean()) continue;
        if (schema[exclusive] == true && schema.contains(inclusive)) {
            schema[exclusive] = schema[inclusive];
            schema.erase(inclusive);
        } else {
            schema.erase(exclusive);
        }
    }
}

// `schema` as a list of parts without allOf or $ref: their targets and
// members become parts of their own.
void expand_parts(const JsonSchemaConverter& converter, const json& schema, const std::string& path,
                  int depth, std::vector<json>& out) {
    if (depth > kMaxSchemaDepth) {
        throw_schema_error(
            path, fmt::format("allOf and $ref nest deeper than {} levels", kMaxSchemaDepth));
    }
    if (!schema.is_object()) {
        if (!schema.is_boolean())
            throw_schema_error(path, "a schema must be an object or a boolean");
        out.push_back(schema);
        return;
    }
    check_schema_keywords(schema, path);
    if (out.size() >= kMaxSchemaAlternatives) {  // a web of allOf and $ref fanning out
        throw_schema_error(path, fmt::format("allOf and $ref make over {} parts to merge",
                                             kMaxSchemaAlternatives));
    }
    json rest = schema;
    if (rest.contains("allOf")) {
        const json parts = rest["allOf"];
        const std::string parts_path = child_path(path, "allOf");
        if (!parts.is_array() || parts.empty()) {
            throw_schema_error(parts_path, "must be a non-empty array of schemas");
        }
        rest.erase("allOf");
        for (size_t i = 0; i < parts.size(); ++i) {
            expand_parts(converter, parts[i], child_path(parts_path, std::to_string(i)), depth + 1,
                         out);
        }
    }
    if (rest.contains("$ref")) {
        const std::string ref_path = child_path(path, "$ref");
        const json& target = converter.resolve_ref(rest["$ref"], ref_path);
        rest.erase("$ref");
        expand_parts(converter, target, ref_path, depth + 1, out);
    }
    normalize_draft4_bounds(rest);
    out.push_back(rest);
}

json merge_parts(const JsonSchemaConverter& converter, const std::vector<json>& parts,
                 const std::string& path, int depth);

// The first part with anyOf/oneOf, distributed over the others; nullopt
// when there is none.
std::optional<json> distributed(const JsonSchemaConverter& converter,
                                const std::vector<json>& parts, const std::string& path,
                                int depth) {
    for (size_t i = 0; i < parts.size(); ++i) {
        if (!parts[i].is_object()) continue;
        const char* keyword = parts[i].contains("anyOf")   ? "anyOf"
                              : parts[i].contains("oneOf") ? "oneOf"
                                                           : nullptr;
        if (keyword == nullptr) continue;
        const json branches = parts[i][keyword];
        const std::string branches_path = child_path(path, keyword);
        if (!branches.is_array() || branches.empty()) {
            throw_schema_error(branches_path, "must be a non-empty array of schemas");
        }
        if (keyword == std::string("oneOf")) {
            require_disjoint_branches(converter, branches, branches_path);
        }
        json alternatives = json::array();
        for (const json& branch : branches) {
            std::vector<json> with_branch = parts;
            with_branch[i].erase(keyword);
            with_branch.push_back(branch);
            const json merged = merge_parts(converter, with_branch, path, depth + 1);
            if (merged == false) continue;
            const bool several = merged.is_object() && merged.contains("anyOf");
            for (const json& m : several ? merged["anyOf"] : json::array({merged})) {
                alternatives.push_back(m);
            }
            if (alternatives.size() > kMaxSchemaAlternatives) {
                throw_schema_error(path, fmt::format("merging allOf makes over {} alternatives",
                                                     kMaxSchemaAlternatives));
            }
        }
        return alternatives.empty() ? json(false) : json{{"anyOf", alternatives}};
    }
    return std::nullopt;
}

// The values one part allows (its enum, filtered by its const), if it lists any.
std::optional<json> listed_values(const json& part, const std::string& path) {
    if (!part.contains("enum") && !part.contains("const")) return std::nullopt;
    if (!part.contains("enum")) return json::array({part["const"]});
    if (!part["enum"].is_array()) throw_schema_error(child_path(path, "enum"), "must be an array");
    json values = json::array();
    for (const json& v : part["enum"]) {
        if (!part.contains("const") || v == part["const"]) values.push_back(v);
    }
    return values;
}

void merge_types_and_values(const std::vector<json>& parts, const std::string& path, json& out) {
    uint8_t types = kAnyType;
    bool typed = false;
    std::optional<json> values;
    for (const json& part : parts) {
        if (part.contains("type")) types &= type_keyword_bits(part, path), typed = true;
        const std::optional<json> listed = listed_values(part, path);
        if (!listed) continue;
        if (!values) {
            values = *listed;
            continue;
        }
        json kept = json::array();
        for (const json& v : *values) {
            if (std::find(listed->begin(), listed->end(), v) != listed->end()) kept.push_back(v);
        }
        values = kept;
    }
    if (typed) {
        out["type"] = json::array();
        for (const auto& [bit, name] : {std::pair{kNullType, "null"},
                                        {kBooleanType, "boolean"},
                                        {kObjectType, "object"},
                                        {kArrayType, "array"},
                                        {kStringType, "string"}}) {
            if (types & bit) out["type"].push_back(name);
        }
        if ((types & kNumberType) == kNumberType) {
            out["type"].push_back("number");
        } else if (types & kIntegerType) {
            out["type"].push_back("integer");
        }
    }
    if (values) out["enum"] = *values;
}

// properties / additionalProperties / required (see the header comment).
void merge_object_keywords(const std::vector<json>& parts, json& out) {
    json properties = json::object();
    json required = json::array();
    std::vector<json> extras;
    for (const json& part : parts) {
        const json listed_here = part.value("properties", json::object());
        for (const auto& [name, schema] : listed_here.items()) {
            if (properties.contains(name)) continue;
            std::vector<json> schemas;
            for (const json& other : parts) {
                const json listed = other.value("properties", json::object());
                if (listed.contains(name))
                    schemas.push_back(listed[name]);
                else if (other.contains("additionalProperties"))
                    schemas.push_back(other["additionalProperties"]);
            }
            properties[name] = all_of(schemas);
        }
        for (const json& name : part.value("required", json::array())) {
            if (std::find(required.begin(), required.end(), name) == required.end())
                required.push_back(name);
        }
        if (part.contains("additionalProperties")) extras.push_back(part["additionalProperties"]);
    }
    if (!properties.empty()) out["properties"] = properties;
    if (!required.empty()) out["required"] = required;
    if (!extras.empty()) out["additionalProperties"] = all_of(extras);
}

// prefixItems / items, by position (items as a list: the older drafts' prefix).
void merge_array_keywords(const std::vector<json>& parts, json& out) {
    const auto prefix_of = [](const json& p) {
        if (p.contains("items") && p["items"].is_array()) return p["items"];
        return p.value("prefixItems", json::array());
    };
    const auto rest_of = [](const json& p) -> std::optional<json> {
        const bool list = p.contains("items") && p["items"].is_array();
        const char* keyword = list ? "additionalItems" : "items";
        if (p.contains(keyword)) return p[keyword];
        return std::nullopt;
    };
    size_t prefix_length = 0;
    std::vector<json> rests;
    for (const json& part : parts) {
        prefix_length = std::max(prefix_length, prefix_of(part).size());
        if (rest_of(part)) rests.push_back(*rest_of(part));
    }
    json prefix = json::array();
    for (size_t k = 0; k < prefix_length; ++k) {
        std::vector<json> schemas;
        for (const json& part : parts) {
            if (k < prefix_of(part).size())
                schemas.push_back(prefix_of(part)[k]);
            else if (rest_of(part))
                schemas.push_back(*rest_of(part));
        }
        prefix.push_back(all_of(schemas));
    }
    if (!prefix.empty()) out["prefixItems"] = prefix;
    if (!rests.empty()) out["items"] = all_of(rests);
}

void merge_bounds_and_strings(const std::vector<json>& parts, const std::string& path, json& out) {
    for (const json& part : parts) {
        for (const char* keyword : kLowerBounds) {
            if (part.contains(keyword) && (!out.contains(keyword) || part[keyword] > out[keyword]))
                out[keyword] = part[keyword];
        }
        for (const char* keyword : kUpperBounds) {
            if (part.contains(keyword) && (!out.contains(keyword) || part[keyword] < out[keyword]))
                out[keyword] = part[keyword];
        }
        for (const char* keyword : {"pattern", "format"}) {
            if (!part.contains(keyword)) continue;
            if (out.contains(keyword) && out[keyword] != part[keyword]) {
                throw_schema_error(
                    child_path(path, keyword),
                    fmt::format("allOf parts with different '{}' cannot be merged", keyword));
            }
            out[keyword] = part[keyword];
        }
    }
}

json merge_parts(const JsonSchemaConverter& converter, const std::vector<json>& given,
                 const std::string& path, int depth) {
    std::vector<json> parts;
    for (const json& part : given) expand_parts(converter, part, path, depth, parts);
    if (const std::optional<json> split = distributed(converter, parts, path, depth)) return *split;
    std::vector<json> objects;
    for (const json& part : parts) {
        if (part == false) return json(false);
        if (part.is_object()) objects.push_back(part);
    }
    json out = json::object();
    merge_types_and_values(objects, path, out);
    merge_object_keywords(objects, out);
    merge_array_keywords(objects, out);
    merge_bounds_and_strings(objects, path, out);
    return out;
}

}  // namespace

json merge_all_of(const JsonSchemaConverter& converter, const std::vector<json>& parts,
                  const std::string& path) {
    return merge_parts(converter, parts, path, 0);
}

}  // namespace servelab
