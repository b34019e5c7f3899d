// json_schema_grammar.cpp — see json_schema_grammar.h; the dispatch of one
// schema to the rule of its kind (json_schema_converter.h lists the files).
//
// Lab 12 (chapter 11.6, constrained decoding). The order of the questions
// asked of a schema is the order of value_rule: a boolean; keywords we
// cannot enforce (refused); allOf, or siblings next to $ref / anyOf (merged
// into one schema first); $ref; anyOf / oneOf; enum / const; and last the
// types, each built by its own file.
//
// What the grammar allows is a subset of what the schema validates, never
// more: properties come in the schema's order and extra ones after them,
// whitespace is bounded, and a schema without `type` that uses only the
// keywords of one kind (properties, say) stands for that kind alone.
#include "reference/constrained/json_schema_grammar.h"

#include <fmt/format.h>

#include <set>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

// Whether `schema` has a constraining keyword besides those in `except`.
bool has_constraints_besides(const json& schema, const std::set<std::string>& except) {
    for (const auto& [keyword, value] : schema.items()) {
        if (is_constraining_keyword(keyword) && !except.count(keyword)) return true;
    }
    return false;
}

// The types a schema without `type` stands for: those its keywords are
// about, or all when it has none of them.
uint8_t inferred_type_bits(const json& schema) {
    uint8_t bits = 0;
    for (const char* k : {"properties", "required", "additionalProperties"}) {
        if (schema.contains(k)) bits |= kObjectType;
    }
    for (const char* k : {"items", "prefixItems", "additionalItems", "minItems", "maxItems"}) {
        if (schema.contains(k)) bits |= kArrayType;
    }
    for (const char* k : {"minLength", "maxLength", "pattern", "format"}) {
        if (schema.contains(k)) bits |= kStringType;
    }
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (schema.contains(k)) bits |= kNumberType;
    }
    return bits == 0 ? uint8_t(kAnyType) : bits;
}

// A JSON pointer's text as a keyword path: "#/$defs/node" -> "$defs.node".
std::string pointer_path(const std::string& pointer) {
    std::string path = pointer.substr(1);
    if (!path.empty() && path[0] == '/') path.erase(0, 1);
    for (char& c : path) {
        if (c == '/') c = '.';
    }
    return path;
}

// Percent-decodes a URI fragment ("#/$defs/a%20b").
std::string percent_decoded(const std::string& text, const std::string& path) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '%') {
            out += text[i];
            continue;
        }
        if (i + 2 >= text.size() || !std::isxdigit(uint8_t(text[i + 1])) ||
            !std::isxdigit(uint8_t(text[i + 2]))) {
            throw_schema_error(path, fmt::format("bad %-escape in $ref '{}'", text));
        }
        out += char(std::stoi(text.substr(i + 1, 2), nullptr, 16));
        i += 2;
    }
    return out;
}

class DepthGuard {
  public:
    DepthGuard(int& depth, const std::string& path) : depth_(depth) {
        if (++depth_ > kMaxSchemaDepth) {
            throw_schema_error(
                path, fmt::format("the schema nests deeper than {} levels", kMaxSchemaDepth));
        }
    }
    ~DepthGuard() { --depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

  private:
    int& depth_;
};

}  // namespace

JsonSchemaConverter::JsonSchemaConverter(GrammarBuilder& builder, const json& root)
    : builder_(builder), root_(root) {}

int32_t JsonSchemaConverter::value_rule(const json& schema, const std::string& path) {
    if (schema.is_boolean()) return schema.get<bool>() ? any_value() : kNoValue;
    if (!schema.is_object()) {
        throw_schema_error(
            path, fmt::format("a schema must be an object or a boolean, not {}", schema.dump()));
    }
    const DepthGuard guard(depth_, path);
    check_schema_keywords(schema, path);
    const bool merge = schema.contains("allOf") ||
                       (schema.contains("$ref") && has_constraints_besides(schema, {"$ref"})) ||
                       (schema.contains("anyOf") && has_constraints_besides(schema, {"anyOf"})) ||
                       (schema.contains("oneOf") && has_constraints_besides(schema, {"oneOf"}));
    if (merge) return value_rule(merge_all_of(*this, {schema}, path), path);
    if (schema.contains("$ref")) return ref_rule(schema, path);
    if (schema.contains("anyOf")) return any_of_rule(schema["anyOf"], child_path(path, "anyOf"));
    if (schema.contains("oneOf")) {
        require_disjoint_branches(*this, schema["oneOf"], child_path(path, "oneOf"));
        return any_of_rule(schema["oneOf"], child_path(path, "oneOf"));
    }
    if (schema.contains("enum") || schema.contains("const")) return enum_rule(schema, path);
    return typed_value_rule(schema, path);
}

const json& JsonSchemaConverter::resolve_ref(const json& ref, const std::string& path) const {
    if (!ref.is_string()) throw_schema_error(path, "$ref must be a string");
    const std::string text = ref.get<std::string>();
    if (text.empty() || text[0] != '#') {
        throw_schema_error(path, fmt::format("$ref '{}' is not supported: only references "
                                             "inside the schema (#, #/$defs/...) are",
                                             text));
    }
    try {
        return root_.at(json::json_pointer(percent_decoded(text.substr(1), path)));
    } catch (const json::exception&) {
        throw_schema_error(path, fmt::format("$ref '{}' points to nothing in the schema", text));
    }
}

// One rule per referenced definition. A definition that refers to itself
// (directly or through others) gets its rule when the recursion is met;
// one that does not is used directly, with no rule in between.
int32_t JsonSchemaConverter::ref_rule(const json& schema, const std::string& path) {
    constexpr int32_t kInProgress = -2;
    const std::string ref_path = child_path(path, "$ref");
    const json& target = resolve_ref(schema["$ref"], ref_path);
    const std::string pointer = schema["$ref"].get<std::string>();
    const auto it = ref_rules_.find(pointer);
    if (it != ref_rules_.end()) {
        if (it->second != kInProgress) return it->second;
        return it->second = builder_.fresh_rule(rule_name(pointer_path(pointer), "") + "-ref");
    }
    ref_rules_[pointer] = kInProgress;
    const int32_t value = value_rule(target, pointer_path(pointer));
    const int32_t recursive = ref_rules_[pointer];
    if (recursive == kInProgress) return ref_rules_[pointer] = value;
    if (value == kNoValue) {
        throw_schema_error(ref_path, fmt::format("'{}' validates no value", pointer));
    }
    builder_.add_alternative(recursive, ref(value));
    return recursive;
}

int32_t JsonSchemaConverter::any_of_rule(const json& branches, const std::string& path) {
    if (!branches.is_array() || branches.empty()) {
        throw_schema_error(path, "must be a non-empty array of schemas");
    }
    if (branches.size() > kMaxSchemaAlternatives) {
        throw_schema_error(path, fmt::format("{} branches is over the limit of {}", branches.size(),
                                             kMaxSchemaAlternatives));
    }
    std::vector<GrammarSymbols> alternatives;
    for (size_t i = 0; i < branches.size(); ++i) {
        const int32_t branch = value_rule(branches[i], child_path(path, std::to_string(i)));
        if (branch != kNoValue) alternatives.push_back(ref(branch));
    }
    if (alternatives.empty()) return kNoValue;
    if (alternatives.size() == 1) return alternatives[0][0].rule;
    return new_rule(path, "", alternatives);
}

// The values of enum (and/or const) of the allowed types, each spelled as
// nlohmann's compact dump writes it. Other keywords beside them are refused
// rather than checked against each value.
int32_t JsonSchemaConverter::enum_rule(const json& schema, const std::string& path) {
    for (const auto& [keyword, value] : schema.items()) {
        if (is_constraining_keyword(keyword) && keyword != "enum" && keyword != "const" &&
            keyword != "type") {
            throw_schema_error(child_path(path, keyword),
                               fmt::format("'{}' beside enum/const is not supported", keyword));
        }
    }
    json values = schema.contains("enum") ? schema["enum"] : json::array({schema["const"]});
    if (!values.is_array()) throw_schema_error(child_path(path, "enum"), "must be an array");
    if (values.size() > kMaxEnumValues) {
        throw_schema_error(
            child_path(path, "enum"),
            fmt::format("{} values is over the limit of {}", values.size(), kMaxEnumValues));
    }
    const uint8_t types = type_keyword_bits(schema, path);
    std::set<std::string> seen;
    std::vector<GrammarSymbols> alternatives;
    size_t total_bytes = 0;
    for (const json& value : values) {
        if (schema.contains("const") && value != schema["const"]) continue;
        if ((value_type_bit(value) & types) == 0) continue;
        // 1.0 is an integer from draft 6 on, not in draft 4: leave it out.
        if (value.is_number_float() && (types & kFractionType) == 0) continue;
        std::string text;
        try {
            text = value.dump();
        } catch (const json::exception&) {
            throw_schema_error(child_path(path, "enum"), "a value is not valid UTF-8");
        }
        total_bytes += text.size();
        if (total_bytes > kMaxEnumBytes) {
            throw_schema_error(child_path(path, "enum"),
                               fmt::format("the values are over {} bytes", kMaxEnumBytes));
        }
        if (seen.insert(text).second) alternatives.push_back(lit(text));
    }
    if (alternatives.empty()) return kNoValue;
    return new_rule(path, "enum", alternatives);
}

int32_t JsonSchemaConverter::typed_value_rule(const json& schema, const std::string& path) {
    const uint8_t types =
        schema.contains("type") ? type_keyword_bits(schema, path) : inferred_type_bits(schema);
    if (types == kAnyType && !has_constraints_besides(schema, {"type"})) return any_value();
    std::vector<int32_t> rules;
    if (types & kNullType) rules.push_back(new_rule(path, "null", {lit("null")}));
    if (types & kBooleanType) {
        rules.push_back(new_rule(path, "boolean", {lit("true"), lit("false")}));
    }
    if (types & kObjectType) rules.push_back(object_rule(schema, path));
    if (types & kArrayType) rules.push_back(array_rule(schema, path));
    if (types & kStringType) rules.push_back(string_rule(schema, path));
    if (types & kFractionType) {
        rules.push_back(number_rule(schema, path));
    } else if (types & kIntegerType) {
        rules.push_back(integer_rule(schema, path));
    }
    std::vector<GrammarSymbols> alternatives;
    for (const int32_t rule : rules) {
        if (rule != kNoValue) alternatives.push_back(ref(rule));
    }
    if (alternatives.empty()) return kNoValue;
    if (alternatives.size() == 1) return alternatives[0][0].rule;
    return new_rule(path, "", alternatives);
}

std::string JsonSchemaConverter::rule_name(const std::string& path, const std::string& what) {
    std::string name;
    size_t start = 0;
    bool skipped = false;
    while (start <= path.size() && !path.empty()) {
        size_t end = path.find('.', start);
        if (end == std::string::npos) end = path.size();
        const std::string segment = path.substr(start, end - start);
        const bool skip = segment == "properties" && !skipped;
        if (!skip) name += (name.empty() ? "" : ".") + segment;
        skipped = skip;
        start = end + 1;
    }
    if (name.empty()) name = "root";
    for (char& c : name) {
        if (!std::isalnum(uint8_t(c)) && c != '.' && c != '-' && c != '_' && c != '$') c = '_';
    }
    return what.empty() ? name : name + "-" + what;
}

void JsonSchemaConverter::check_rule_count(const std::string& path) const {
    if (builder_.num_rules() > kMaxSchemaRules) {
        throw_schema_error(path, fmt::format("the grammar needs over {} rules", kMaxSchemaRules));
    }
}

int32_t JsonSchemaConverter::new_rule(const std::string& path, const std::string& what,
                                      const std::vector<GrammarSymbols>& alternatives) {
    return named_rule(rule_name(path, what), alternatives, path);
}

int32_t JsonSchemaConverter::named_rule(const std::string& name,
                                        const std::vector<GrammarSymbols>& alternatives,
                                        const std::string& path) {
    const int32_t rule = builder_.fresh_rule(name);
    check_rule_count(path);
    for (const GrammarSymbols& alternative : alternatives) {
        builder_.add_alternative(rule, alternative);
    }
    return rule;
}

int32_t add_json_schema_rule(GrammarBuilder& builder, const json& schema, const std::string& hint) {
    // Declared first, so that it gets `hint` itself as its name.
    const int32_t rule = builder.fresh_rule(hint);
    JsonSchemaConverter converter(builder, schema);
    int32_t value = kNoValue;
    try {
        value = converter.value_rule(schema, "");
    } catch (const nlohmann::ordered_json::exception& e) {
        // A keyword of the wrong JSON type that no check above caught.
        throw SchemaError(fmt::format("JSON schema: malformed ({})", e.what()), "");
    }
    if (value == kNoValue) throw_schema_error("", "the schema validates no JSON value");
    builder.add_alternative(rule, ref(value));
    return rule;
}

Grammar json_schema_grammar(const json& schema) {
    GrammarBuilder builder;
    add_json_schema_rule(builder, schema, "root");
    try {
        return builder.build("root");
    } catch (const SchemaError&) {
        throw;
    } catch (const GrammarError& e) {
        throw SchemaError(fmt::format("JSON schema: {}", e.what()), "");
    }
}

Grammar json_object_grammar() {
    GrammarBuilder builder;
    const int32_t root = builder.fresh_rule("root");
    JsonSchemaConverter converter(builder, json::object());
    builder.add_alternative(root, ref(converter.value_rule(json{{"type", "object"}}, "")));
    return builder.build("root");
}

}  // namespace servelab
