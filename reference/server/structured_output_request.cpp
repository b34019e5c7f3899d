// structured_output_request.cpp — see structured_output_request.h.
#include "reference/server/structured_output_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "reference/server/openai_protocol.h"

namespace servelab {
namespace {

// A schema given as an object, or (vLLM accepts both) as JSON text.
std::string schema_text(const nlohmann::ordered_json& schema, const std::string& param) {
    if (schema.is_object() || schema.is_boolean()) return schema.dump();
    if (schema.is_string()) {
        const nlohmann::ordered_json parsed =
            nlohmann::ordered_json::parse(schema.get<std::string>(), nullptr, false);
        if (parsed.is_object() || parsed.is_boolean()) return parsed.dump();
    }
    refuse_field(param, fmt::format("'{}' must be a JSON schema (an object)", param));
}

ConstraintSpec from_response_format(const nlohmann::ordered_json& format) {
    if (!format.is_object() || !format.contains("type") || !format["type"].is_string()) {
        refuse_field("response_format", "'response_format' must be an object with a 'type'");
    }
    const std::string type = format["type"].get<std::string>();
    ConstraintSpec spec;
    spec.param = "response_format";
    if (type == "text") return spec;
    if (type == "json_object") {
        spec.kind = ConstraintSpec::Kind::kJsonObject;
        return spec;
    }
    if (type != "json_schema") {
        refuse_field("response_format.type", fmt::format("response_format type '{}' is not one of "
                                                         "text, json_object, json_schema",
                                                         type.substr(0, 40)));
    }
    const nlohmann::ordered_json* wrapper = request_field(format, "json_schema");
    if (wrapper == nullptr || !wrapper->is_object() || !wrapper->contains("schema")) {
        refuse_field(
            "response_format.json_schema",
            "response_format json_schema needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
    }
    const nlohmann::ordered_json& schema = (*wrapper)["schema"];
    const nlohmann::ordered_json* strict = request_field(*wrapper, "strict");
    if (strict != nullptr && !strict->is_boolean()) {
        refuse_field("response_format.json_schema.strict", "'strict' must be true or false");
    }
    if (strict != nullptr && strict->get<bool>()) check_strict_schema(schema);
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    spec.param = "response_format.json_schema.schema";
    spec.text = schema_text(schema, spec.param);
    return spec;
}

std::string string_field(const nlohmann::ordered_json& value, const std::string& param) {
    if (!value.is_string() || value.get<std::string>().empty()) {
        refuse_field(param, fmt::format("'{}' must be a non-empty string", param));
    }
    return value.get<std::string>();
}

std::vector<std::string> choices(const nlohmann::ordered_json& value, const std::string& param) {
    if (!value.is_array() || value.empty())
        refuse_field(param, fmt::format("'{}' must be a non-empty list of strings", param));
    std::vector<std::string> out;
    for (const nlohmann::ordered_json& choice : value) {
        if (!choice.is_string()) refuse_field(param, fmt::format("'{}' must hold strings", param));
        out.push_back(choice.get<std::string>());
    }
    return out;
}

// vLLM's structured_outputs: exactly one of its keys.
ConstraintSpec from_structured_outputs(const nlohmann::ordered_json& options) {
    if (!options.is_object())
        refuse_field("structured_outputs", "'structured_outputs' must be an object");
    std::vector<ConstraintSpec> found;
    for (const auto& [key, value] : options.items()) {
        if (value.is_null()) continue;
        ConstraintSpec spec;
        spec.param = "structured_outputs." + key;
        if (key == "json") {
            spec.kind = ConstraintSpec::Kind::kJsonSchema;
            spec.text = schema_text(value, spec.param);
        } else if (key == "regex") {
            spec.kind = ConstraintSpec::Kind::kRegex;
            spec.text = string_field(value, spec.param);
        } else if (key == "choice") {
            spec.kind = ConstraintSpec::Kind::kChoice;
            spec.choices = choices(value, spec.param);
        } else if (key == "grammar") {
            spec.kind = ConstraintSpec::Kind::kGbnf;
            spec.text = string_field(value, spec.param);
        } else if (key == "json_object") {
            if (!value.is_boolean())
                refuse_field(spec.param, "'structured_outputs.json_object' must be true or false");
            if (!value.get<bool>()) continue;
            spec.kind = ConstraintSpec::Kind::kJsonObject;
        } else {
            refuse_field(spec.param,
                         fmt::format("structured_outputs '{}' is not supported (json, regex, "
                                     "choice, grammar, json_object)",
                                     key.substr(0, 40)));
        }
        found.push_back(std::move(spec));
    }
    if (found.size() > 1) {
        refuse_field("structured_outputs",
                     "'structured_outputs' takes one of json, regex, choice, grammar, json_object");
    }
    return found.empty() ? ConstraintSpec{} : found.front();
}

}  // namespace

void check_strict_schema(const nlohmann::ordered_json& schema) {
    // Depth-first over the subschemas, each with its path for the error.
    std::vector<std::pair<const nlohmann::ordered_json*, std::string>> pending = {
        {&schema, "schema"}};
    while (!pending.empty()) {
        const auto [node, path] = pending.back();
        pending.pop_back();
        if (!node->is_object()) continue;
        if (node->contains("properties") && (*node)["properties"].is_object()) {
            const nlohmann::ordered_json& properties = (*node)["properties"];
            const nlohmann::ordered_json required =
                node->value("required", nlohmann::ordered_json::array());
            for (const auto& [name, sub] : properties.items()) {
                if (std::find(required.begin(), required.end(), name) == required.end()) {
                    refuse_field(
                        "response_format.json_schema.schema",
                        fmt::format("strict schemas must list every property in 'required': "
                                    "'{}' is missing at {}",
                                    name.substr(0, 40), path));
                }
                pending.push_back({&sub, path + ".properties." + name});
            }
            if (node->value("additionalProperties", nlohmann::ordered_json(true)) != false) {
                refuse_field("response_format.json_schema.schema",
                             fmt::format("strict schemas must set 'additionalProperties': false on "
                                         "every object ({})",
                                         path));
            }
        }
        for (const char* key : {"items", "anyOf", "$defs", "definitions", "prefixItems", "allOf"}) {
            if (!node->contains(key)) continue;
            const nlohmann::ordered_json& child = (*node)[key];
            if (child.is_object() &&
                (std::string(key) == "$defs" || std::string(key) == "definitions")) {
                for (const auto& [name, sub] : child.items())
                    pending.push_back({&sub, path + "." + key + "." + name});
            } else if (child.is_array()) {
                for (size_t i = 0; i < child.size(); ++i)
                    pending.push_back({&child[i], fmt::format("{}.{}[{}]", path, key, i)});
            } else {
                pending.push_back({&child, path + "." + key});
            }
        }
    }
}

ConstraintSpec parse_constraint(const nlohmann::ordered_json& body) {
    std::vector<ConstraintSpec> found;
    if (const nlohmann::ordered_json* format = request_field(body, "response_format")) {
        ConstraintSpec spec = from_response_format(*format);
        if (!spec.empty()) found.push_back(std::move(spec));
    }
    if (const nlohmann::ordered_json* options = request_field(body, "structured_outputs")) {
        ConstraintSpec spec = from_structured_outputs(*options);
        if (!spec.empty()) found.push_back(std::move(spec));
    }
    if (const nlohmann::ordered_json* schema =
            request_field(body, "json_schema")) {  // llama.cpp's spelling
        ConstraintSpec spec;
        spec.kind = ConstraintSpec::Kind::kJsonSchema;
        spec.param = "json_schema";
        spec.text = schema_text(*schema, spec.param);
        found.push_back(std::move(spec));
    }
    if (const nlohmann::ordered_json* grammar =
            request_field(body, "grammar")) {  // llama.cpp's spelling
        ConstraintSpec spec;
        spec.kind = ConstraintSpec::Kind::kGbnf;
        spec.param = "grammar";
        spec.text = string_field(*grammar, spec.param);
        found.push_back(std::move(spec));
    }
    if (found.size() > 1) {
        refuse_field(found[1].param,
                     fmt::format("'{}' and '{}' both constrain the output; send one",
                                 found[0].param, found[1].param));
    }
    return found.empty() ? ConstraintSpec{} : found.front();
}

}  // namespace servelab
