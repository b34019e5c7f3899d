// json_schema_objects.cpp — JSON Schema's objects and arrays as grammar rules.
//
// Lab 12 (chapter 11.6, constrained decoding): the exercise. The other
// kinds of value (strings, numbers, any value, $ref, anyOf, ...) come from
// JsonSchemaConverter (json_schema_converter.h); these two functions say how
// they are put together.
//
// An object writes its properties in the schema's order: each required one
// always, each optional one or nothing, then, unless additionalProperties is
// false, any number of extra properties, named so that they cannot be a
// listed one (a first character no listed name starts with).
// The grammar fixes that order (JSON objects are unordered, but a grammar
// that allowed every order of n properties would need 2^n rules). The only
// hard part is the commas: a member is preceded by one unless it is the
// first written, and with optional members the first written is not known
// in advance. So each position gets two rules: which member comes next (the
// comma, if any, already written), and what may come once something has
// been written (the end, or a comma and the next member).
//
// An array is its prefix items in order (prefixItems, or items given as a
// list before draft 2020-12), then any number of elements of the schema in
// items (additionalItems in the older drafts), between minItems and
// maxItems elements in all.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

struct ObjectMember {
    std::string name;
    int32_t value = kNoValue;  // the rule of its value
    bool required = false;
};

std::vector<std::string> required_names(const json& schema, const std::string& path) {
    std::vector<std::string> names;
    if (!schema.contains("required")) return names;
    const json& required = schema["required"];
    if (!required.is_array()) throw_schema_error(child_path(path, "required"), "must be an array");
    for (const json& name : required) {
        if (!name.is_string()) {
            throw_schema_error(child_path(path, "required"), "must hold property names");
        }
        const std::string text = name.get<std::string>();
        if (std::find(names.begin(), names.end(), text) == names.end()) names.push_back(text);
    }
    return names;
}

// The members in schema order: the listed properties, then the names that
// `required` lists and `properties` does not (their value: extra_value).
// An optional member whose value validates nothing is left out (it must be
// absent); when a required one validates nothing, so does the object.
std::optional<std::vector<ObjectMember>> object_members(JsonSchemaConverter& converter,
                                                        const json& schema, int32_t extra_value,
                                                        const std::string& path) {
    const json properties = schema.value("properties", json::object());
    if (!properties.is_object()) {
        throw_schema_error(child_path(path, "properties"), "must be an object");
    }
    const std::vector<std::string> required = required_names(schema, path);
    const auto is_required = [&](const std::string& name) {
        return std::find(required.begin(), required.end(), name) != required.end();
    };
    std::vector<ObjectMember> members;
    for (const auto& [name, property] : properties.items()) {
        const std::string property_path = child_path(child_path(path, "properties"), name);
        const ObjectMember member{name, converter.value_rule(property, property_path),
                                  is_required(name)};
        if (member.value == kNoValue && member.required) return std::nullopt;
        if (member.value != kNoValue) members.push_back(member);
    }
    for (const std::string& name : required) {
        if (properties.contains(name)) continue;
        if (extra_value == kNoValue) return std::nullopt;
        members.push_back({name, extra_value, true});
    }
    return members;
}

// `"name" ws ":" ws value ws`, the key spelled as nlohmann dumps it.
GrammarSymbols member_symbols(JsonSchemaConverter& converter, const GrammarSymbols& key,
                              int32_t value) {
    const int32_t ws = converter.whitespace();
    return key + ref(ws) + lit(":") + ref(ws) + ref(value) + ref(ws);
}

// The extra properties, after the listed ones: `pick` (an extra member and
// what may follow it; kNoValue when additionalProperties is false) and
// `after` (what may follow once something is written).
struct ExtraMembers {
    int32_t pick = kNoValue;
    int32_t after = kNoValue;
};

ExtraMembers extra_member_rules(JsonSchemaConverter& converter, const json& schema,
                                const std::vector<ObjectMember>& members, int32_t extra_value,
                                const std::string& path) {
    if (extra_value == kNoValue) return {kNoValue, converter.new_rule(path, "end", {{}})};
    std::vector<std::string> names;
    for (const ObjectMember& member : members) names.push_back(member.name);
    const json properties = schema.value("properties", json::object());
    for (const auto& [name, property] : properties.items()) {
        names.push_back(name);  // listed with the schema false: absent, and not extra either
    }
    const std::string extra_path = child_path(path, "additionalProperties");
    const GrammarSymbols extra =
        member_symbols(converter, ref(converter.extra_key_rule(names, extra_path)), extra_value);
    // after ::= "" | "," ws extra after
    const int32_t after =
        converter.builder().fresh_rule(JsonSchemaConverter::rule_name(path, "extra-after"));
    converter.builder().add_alternative(after, {});
    converter.builder().add_alternative(
        after, lit(",") + ref(converter.whitespace()) + extra + ref(after));
    return {converter.new_rule(path, "extra", {extra + ref(after)}), after};
}

// What an array's elements are: the rules of the first few, and of every
// one after them (kNoValue: there are none after them).
struct ArrayItems {
    std::vector<int32_t> prefix;
    int32_t rest = kNoValue;
};

ArrayItems array_items(JsonSchemaConverter& converter, const json& schema,
                       const std::string& path) {
    const bool list_items = schema.contains("items") && schema["items"].is_array();
    const char* prefix_keyword = list_items ? "items" : "prefixItems";
    const char* rest_keyword = list_items ? "additionalItems" : "items";
    ArrayItems items;
    if (schema.contains(prefix_keyword)) {
        const json& prefix = schema[prefix_keyword];
        const std::string prefix_path = child_path(path, prefix_keyword);
        if (!prefix.is_array()) throw_schema_error(prefix_path, "must be an array of schemas");
        for (size_t i = 0; i < prefix.size(); ++i) {
            items.prefix.push_back(
                converter.value_rule(prefix[i], child_path(prefix_path, std::to_string(i))));
        }
    }
    items.rest = converter.value_rule(schema.value(rest_keyword, json(true)),
                                      child_path(path, rest_keyword));
    return items;
}

}  // namespace

int32_t JsonSchemaConverter::object_rule(const json& schema, const std::string& path) {
    // BEGIN SOLUTION lab12 (JsonSchemaConverter::object_rule)
    // HINT: object_members gives the members in schema order (nullopt: the object validates
    // HINT: nothing: kNoValue); extra_member_rules the (pick, after) pair for the extra
    // HINT: properties (pick is kNoValue when there are none). Then from the last member
    // HINT: back, two new rules per member i: pick_i (the next member written, any comma
    // HINT: already behind: member_i then after_{i+1}, or, if member_i is optional,
    // HINT: pick_{i+1}) and after_i (once something was written: "," ws pick_i, or the end
    // HINT: if no member from i on is required). member_symbols spells one member
    // HINT: (json_string_literal its key). The object: "{" ws pick_0 "}", and "{" ws "}"
    // HINT: when no member is required.
    const int32_t extra_value = value_rule(schema.value("additionalProperties", json(true)),
                                           child_path(path, "additionalProperties"));
    const std::optional<std::vector<ObjectMember>> members =
        object_members(*this, schema, extra_value, path);
    if (!members) return kNoValue;
    // Built from the last member back, for members i..n:
    //   pick_i  ::= member_i after_{i+1} | pick_{i+1}   (the second if member_i is optional)
    //   after_i ::= "" | "," ws pick_i                   (the first if none left is required)
    // pick: the next member written (a comma, if any, already behind);
    // after: what may come once something has been written.
    auto [pick, after] = extra_member_rules(*this, schema, *members, extra_value, path);
    bool all_optional = true;  // no required member among i..n
    const int32_t ws = whitespace();
    for (size_t i = members->size(); i-- > 0;) {
        const ObjectMember& m = (*members)[i];
        const GrammarSymbols member =
            member_symbols(*this, lit(json_string_literal(m.name, path)), m.value);
        std::vector<GrammarSymbols> pick_alternatives = {member + ref(after)};
        if (!m.required && pick != kNoValue) pick_alternatives.push_back(ref(pick));
        pick = new_rule(path, m.name + "-pick", pick_alternatives);
        all_optional = all_optional && !m.required;
        std::vector<GrammarSymbols> after_alternatives = {lit(",") + ref(ws) + ref(pick)};
        if (all_optional) after_alternatives.push_back({});
        after = new_rule(path, m.name + "-after", after_alternatives);
    }
    std::vector<GrammarSymbols> alternatives;
    if (all_optional) alternatives.push_back(lit("{") + ref(ws) + lit("}"));
    if (pick != kNoValue) alternatives.push_back(lit("{") + ref(ws) + ref(pick) + lit("}"));
    return new_rule(path, "object", alternatives);
    // END SOLUTION
}

int32_t JsonSchemaConverter::array_rule(const json& schema, const std::string& path) {
    // BEGIN SOLUTION lab12 (JsonSchemaConverter::array_rule)
    // HINT: array_items gives the prefix items' rules and the rest's (kNoValue: validates
    // HINT: nothing). The most elements allowed: maxItems, lowered to k at the first prefix
    // HINT: item k that validates nothing, and to the prefix's length when the rest
    // HINT: validates nothing; minItems above that: kNoValue. Then after(k), what may follow
    // HINT: once k elements are written, from the last k back to 1: "" when k >= minItems,
    // HINT: and "," ws element(k) ws after(k+1) while more may come (with no limit the last
    // HINT: after loops on itself). The array: "[" ws "]" when minItems is 0, and "[" ws
    // HINT: element(0) ws after(1) "]" when at least one element is allowed.
    const ArrayItems items = array_items(*this, schema, path);
    const int64_t min_items = count_keyword(schema, "minItems", path).value_or(0);
    // At most this many elements: maxItems, and no element of a schema that
    // validates nothing (a prefix item, or all after the prefix).
    std::optional<int64_t> limit = count_keyword(schema, "maxItems", path);
    const auto cap = [&](int64_t n) { limit = std::min(limit.value_or(n), n); };
    for (size_t k = 0; k < items.prefix.size(); ++k) {
        if (items.prefix[k] == kNoValue) cap(int64_t(k));
    }
    if (items.rest == kNoValue) cap(int64_t(items.prefix.size()));
    if (limit && min_items > *limit) return kNoValue;
    const auto element = [&](int64_t k) {
        return size_t(k) < items.prefix.size() ? items.prefix[size_t(k)] : items.rest;
    };
    const int32_t ws = whitespace();
    // after(k): what follows once k elements are written. From k_last on
    // nothing changes: it ends there, or (no maxItems) loops on itself.
    const int64_t k_last = limit ? std::max<int64_t>(*limit, 1)
                                 : std::max<int64_t>({int64_t(items.prefix.size()), min_items, 1});
    int32_t after = new_rule(path, fmt::format("after-{}", k_last), {{}});
    if (!limit) {
        builder_.add_alternative(after,
                                 lit(",") + ref(ws) + ref(items.rest) + ref(ws) + ref(after));
    }
    for (int64_t k = k_last - 1; k >= 1; --k) {
        std::vector<GrammarSymbols> alternatives;
        if (k >= min_items) alternatives.push_back({});
        alternatives.push_back(lit(",") + ref(ws) + ref(element(k)) + ref(ws) + ref(after));
        after = new_rule(path, fmt::format("after-{}", k), alternatives);
    }
    std::vector<GrammarSymbols> alternatives;
    if (min_items == 0) alternatives.push_back(lit("[") + ref(ws) + lit("]"));
    if (limit.value_or(1) >= 1) {
        alternatives.push_back(lit("[") + ref(ws) + ref(element(0)) + ref(ws) + ref(after) +
                               lit("]"));
    }
    return new_rule(path, "array", alternatives);
    // END SOLUTION
}

}  // namespace servelab
