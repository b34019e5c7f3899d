// json_schema_validator_oracle.h — a JSON Schema validator for the keywords
// the grammar converter supports: the independent judge of its outputs.
//
// Lab 12 test support (chapter 11.6, constrained decoding). The converter
// (json_schema_grammar.h) turns a schema into grammar rules; this checks a
// parsed JSON value against the schema directly, keyword by keyword, as a
// validator does (JSON Schema draft 2020-12, with the older drafts' array
// `items` and boolean exclusive bounds), sharing no code with the
// converter. A property test samples outputs through the grammar and asks
// this whether each validates. Python's jsonschema plays the same part in
// the Python tests; this one lets the C++ graded tests do without Python.
//
// Written for plainness: one function per keyword family, errors as one
// line naming the schema path and the keyword ("properties.age.maximum: 7 >
// 5"). A keyword it does not know and that is not an annotation throws
// std::invalid_argument: an oracle that skipped a keyword would pass wrong
// outputs.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace servelab::test {

namespace validator_oracle_detail {

using json = nlohmann::ordered_json;

// Keywords that constrain nothing (validators ignore them).
inline bool is_annotation(const std::string& keyword) {
    static const std::set<std::string> kAnnotations = {
        "title",    "description", "default",  "examples",  "$schema", "$id",
        "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
    return kAnnotations.count(keyword) != 0;
}

inline bool is_known(const std::string& keyword) {
    static const std::set<std::string> kKnown = {"$ref",
                                                 "type",
                                                 "enum",
                                                 "const",
                                                 "anyOf",
                                                 "oneOf",
                                                 "allOf",
                                                 "properties",
                                                 "required",
                                                 "additionalProperties",
                                                 "items",
                                                 "prefixItems",
                                                 "additionalItems",
                                                 "minItems",
                                                 "maxItems",
                                                 "minLength",
                                                 "maxLength",
                                                 "pattern",
                                                 "format",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "exclusiveMaximum"};
    return kKnown.count(keyword) != 0 || is_annotation(keyword);
}

inline std::string at(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
}

// Whether `value` is a number with an integer value (JSON Schema: 1.0 is an integer).
inline bool is_integral(const json& value) {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double x = value.get<double>();
    return std::isfinite(x) && x == std::floor(x);
}

inline bool has_type(const json& value, const std::string& type) {
    if (type == "null") return value.is_null();
    if (type == "boolean") return value.is_boolean();
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "string") return value.is_string();
    if (type == "number") return value.is_number();
    if (type == "integer") return is_integral(value);
    throw std::invalid_argument("validator oracle: unknown type '" + type + "'");
}

// JSON equality as JSON Schema means it: numbers by value (1 == 1.0).
inline bool json_equal(const json& a, const json& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_number_float() || b.is_number_float()) return a.get<double>() == b.get<double>();
        if (a.is_number_unsigned() || b.is_number_unsigned()) {
            return a.dump() == b.dump();  // both exact integers; the text decides
        }
        return a.get<int64_t>() == b.get<int64_t>();
    }
    if (a.type() != b.type()) return false;
    if (a.is_array()) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i) {
            if (!json_equal(a[i], b[i])) return false;
        }
        return true;
    }
    if (a.is_object()) {
        if (a.size() != b.size()) return false;
        for (const auto& [key, item] : a.items()) {
            if (!b.contains(key) || !json_equal(item, b[key])) return false;
        }
        return true;
    }
    return a == b;
}

// Unicode code points in a UTF-8 string (what minLength and maxLength count).
inline int64_t code_points(const std::string& text) {
    int64_t n = 0;
    for (const char c : text) n += (uint8_t(c) & 0xC0) != 0x80;
    return n;
}

inline bool all_digits(const std::string& s, size_t from, size_t count) {
    if (from + count > s.size()) return false;
    for (size_t i = from; i < from + count; ++i) {
        if (s[i] < '0' || s[i] > '9') return false;
    }
    return true;
}

inline int number_at(const std::string& s, size_t from, size_t count) {
    return std::stoi(s.substr(from, count));
}

// YYYY-MM-DD, a real calendar day (Gregorian leap years).
inline bool is_date(const std::string& s) {
    if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
    if (!all_digits(s, 0, 4) || !all_digits(s, 5, 2) || !all_digits(s, 8, 2)) return false;
    const int year = number_at(s, 0, 4), month = number_at(s, 5, 2), day = number_at(s, 8, 2);
    if (month < 1 || month > 12 || day < 1) return false;
    const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return day <= days[month - 1];
}

// HH:MM:SS[.frac](Z|+HH:MM|-HH:MM), RFC 3339's full-time (second 60 allowed).
inline bool is_time(const std::string& s) {
    if (s.size() < 9 || s[2] != ':' || s[5] != ':') return false;
    if (!all_digits(s, 0, 2) || !all_digits(s, 3, 2) || !all_digits(s, 6, 2)) return false;
    if (number_at(s, 0, 2) > 23 || number_at(s, 3, 2) > 59 || number_at(s, 6, 2) > 60) {
        return false;
    }
    size_t i = 8;
    if (i < s.size() && s[i] == '.') {
        const size_t start = ++i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
        if (i == start) return false;
    }
    if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) return i + 1 == s.size();
    if (i >= s.size() || (s[i] != '+' && s[i] != '-') || s.size() != i + 6) return false;
    return all_digits(s, i + 1, 2) && s[i + 3] == ':' && all_digits(s, i + 4, 2) &&
           number_at(s, i + 1, 2) <= 23 && number_at(s, i + 4, 2) <= 59;
}

inline bool is_uuid(const std::string& s) {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < s.size(); ++i) {
        const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !std::isxdigit(uint8_t(s[i]))) return false;
    }
    return true;
}

inline bool has_format(const std::string& s, const std::string& format) {
    if (format == "date") return is_date(s);
    if (format == "time") return is_time(s);
    if (format == "date-time") {
        return s.size() > 11 && (s[10] == 'T' || s[10] == 't') && is_date(s.substr(0, 10)) &&
               is_time(s.substr(11));
    }
    if (format == "uuid") return is_uuid(s);
    throw std::invalid_argument("validator oracle: format '" + format + "' is not supported");
}

class Validator {
  public:
    explicit Validator(const json& root) : root_(root) {}

    // "" when `value` validates against `schema`, else why not (one line).
    std::string check(const json& schema, const json& value, const std::string& path, int depth) {
        if (depth > 200) throw std::invalid_argument("validator oracle: $ref recursion too deep");
        if (schema.is_boolean()) return schema.get<bool>() ? "" : at(path, "false");
        if (!schema.is_object())
            throw std::invalid_argument("validator oracle: bad schema at " + path);
        for (const auto& [keyword, unused] : schema.items()) {
            if (!is_known(keyword)) {
                throw std::invalid_argument("validator oracle: keyword '" + keyword +
                                            "' is not supported (at " + path + ")");
            }
        }
        for (const auto& step :
             {&Validator::check_ref, &Validator::check_type, &Validator::check_enum,
              &Validator::check_combinators, &Validator::check_object, &Validator::check_array,
              &Validator::check_string, &Validator::check_number}) {
            std::string why = (this->*step)(schema, value, path, depth);
            if (!why.empty()) return why;
        }
        return "";
    }

  private:
    std::string check_ref(const json& schema, const json& value, const std::string& path,
                          int depth) {
        if (!schema.contains("$ref")) return "";
        const std::string ref = schema["$ref"].get<std::string>();
        if (ref.empty() || ref[0] != '#')
            throw std::invalid_argument("validator oracle: $ref " + ref);
        const json& target = root_.at(json::json_pointer(ref.substr(1)));
        return check(target, value, at(path, "$ref"), depth + 1);
    }

    std::string check_type(const json& schema, const json& value, const std::string& path, int) {
        if (!schema.contains("type")) return "";
        const json& type = schema["type"];
        const json names = type.is_array() ? type : json::array({type});
        for (const json& name : names) {
            if (has_type(value, name.get<std::string>())) return "";
        }
        return at(path, "type") + ": " + value.dump() + " is not " + type.dump();
    }

    std::string check_enum(const json& schema, const json& value, const std::string& path, int) {
        if (schema.contains("const") && !json_equal(schema["const"], value)) {
            return at(path, "const") + ": " + value.dump();
        }
        if (!schema.contains("enum")) return "";
        for (const json& allowed : schema["enum"]) {
            if (json_equal(allowed, value)) return "";
        }
        return at(path, "enum") + ": " + value.dump() + " is not listed";
    }

    std::string check_combinators(const json& schema, const json& value, const std::string& path,
                                  int depth) {
        if (schema.contains("allOf")) {
            for (size_t i = 0; i < schema["allOf"].size(); ++i) {
                std::string why = check(schema["allOf"][i], value,
                                        at(at(path, "allOf"), std::to_string(i)), depth + 1);
                if (!why.empty()) return why;
            }
        }
        for (const char* keyword : {"anyOf", "oneOf"}) {
            if (!schema.contains(keyword)) continue;
            int matches = 0;
            for (size_t i = 0; i < schema[keyword].size(); ++i) {
                matches += check(schema[keyword][i], value,
                                 at(at(path, keyword), std::to_string(i)), depth + 1)
                               .empty();
            }
            const bool one_of = std::string(keyword) == "oneOf";
            if (matches == 0 || (one_of && matches > 1)) {
                return at(path, keyword) + ": " + value.dump() + " matches " +
                       std::to_string(matches) + " branches";
            }
        }
        return "";
    }

    std::string check_object(const json& schema, const json& value, const std::string& path,
                             int depth) {
        if (!value.is_object()) return "";
        const json properties = schema.value("properties", json::object());
        for (const json& name : schema.value("required", json::array())) {
            if (!value.contains(name.get<std::string>())) {
                return at(path, "required") + ": " + name.dump() + " is missing";
            }
        }
        for (const auto& [key, item] : value.items()) {
            const bool listed = properties.contains(key);
            const json& sub =
                listed ? properties[key] : schema.value("additionalProperties", json(true));
            std::string why =
                check(sub, item,
                      listed ? at(at(path, "properties"), key) : at(path, "additionalProperties"),
                      depth + 1);
            if (!why.empty()) return why;
        }
        return "";
    }

    std::string check_array(const json& schema, const json& value, const std::string& path,
                            int depth) {
        if (!value.is_array()) return "";
        const int64_t n = int64_t(value.size());
        if (schema.contains("minItems") && n < schema["minItems"].get<int64_t>()) {
            return at(path, "minItems") + ": " + std::to_string(n) + " items";
        }
        if (schema.contains("maxItems") && n > schema["maxItems"].get<int64_t>()) {
            return at(path, "maxItems") + ": " + std::to_string(n) + " items";
        }
        const bool list_items = schema.contains("items") && schema["items"].is_array();
        const json prefix =
            list_items ? schema["items"] : schema.value("prefixItems", json::array());
        const json rest = list_items ? schema.value("additionalItems", json(true))
                                     : schema.value("items", json(true));
        for (size_t i = 0; i < value.size(); ++i) {
            const json& sub = i < prefix.size() ? prefix[i] : rest;
            std::string why =
                check(sub, value[i], at(at(path, "items"), std::to_string(i)), depth + 1);
            if (!why.empty()) return why;
        }
        return "";
    }

    std::string check_string(const json& schema, const json& value, const std::string& path, int) {
        if (!value.is_string()) return "";
        const std::string text = value.get<std::string>();
        const int64_t length = code_points(text);
        if (schema.contains("minLength") && length < schema["minLength"].get<int64_t>()) {
            return at(path, "minLength") + ": " + value.dump();
        }
        if (schema.contains("maxLength") && length > schema["maxLength"].get<int64_t>()) {
            return at(path, "maxLength") + ": " + value.dump();
        }
        if (schema.contains("pattern") &&
            !std::regex_search(
                text, std::regex(schema["pattern"].get<std::string>(), std::regex::ECMAScript))) {
            return at(path, "pattern") + ": " + value.dump();
        }
        if (schema.contains("format") && !has_format(text, schema["format"].get<std::string>())) {
            return at(path, "format") + ": " + value.dump();
        }
        return "";
    }

    std::string check_number(const json& schema, const json& value, const std::string& path, int) {
        if (!value.is_number()) return "";
        const bool draft4_min = schema.value("exclusiveMinimum", json()) == json(true);
        const bool draft4_max = schema.value("exclusiveMaximum", json()) == json(true);
        const struct {
            const char* keyword;
            bool lower, exclusive;
        } bounds[] = {{"minimum", true, draft4_min},
                      {"maximum", false, draft4_max},
                      {"exclusiveMinimum", true, true},
                      {"exclusiveMaximum", false, true}};
        for (const auto& b : bounds) {
            if (!schema.contains(b.keyword) || !schema[b.keyword].is_number()) continue;
            const int order = compare_numbers(value, schema[b.keyword]);  // value vs bound
            const bool fails = b.lower ? (b.exclusive ? order <= 0 : order < 0)
                                       : (b.exclusive ? order >= 0 : order > 0);
            if (fails) return at(path, b.keyword) + ": " + value.dump();
        }
        return "";
    }

    // -1, 0 or 1 as a < b, a == b, a > b; exact when both are integers.
    static int compare_numbers(const json& a, const json& b) {
        if (!a.is_number_float() && !b.is_number_float()) {
            const __int128 x = as_int128(a), y = as_int128(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        const long double x = as_long_double(a), y = as_long_double(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    static __int128 as_int128(const json& v) {
        return v.is_number_unsigned() ? __int128(v.get<uint64_t>()) : __int128(v.get<int64_t>());
    }
    static long double as_long_double(const json& v) {
        if (v.is_number_float()) return v.get<double>();
        return v.is_number_unsigned() ? (long double)v.get<uint64_t>()
                                      : (long double)v.get<int64_t>();
    }

    const json& root_;
};

}  // namespace validator_oracle_detail

// "" when `value` validates against `schema` (the root, for $ref), else one
// line naming the keyword that failed and where. Throws std::invalid_argument
// for a keyword or format outside the supported subset.
inline std::string schema_violation(const nlohmann::ordered_json& schema,
                                    const nlohmann::ordered_json& value) {
    validator_oracle_detail::Validator validator(schema);
    return validator.check(schema, value, "", 0);
}

// What text_violation says of a text it cannot judge: a number too large for a
// double (JSON allows 2e+379; nlohmann refuses to parse it, Python reads inf).
inline const std::string kNotJudged = "(not judged: a number too large for a double)";

// The same for a JSON text: "" when it parses (strictly, as JSON) and
// validates; kNotJudged when a number overflows a double. Unless
// `allow_duplicate_keys`, an object holding a key twice is a violation (the
// grammar writes each listed property once; json_schema_grammar.h allows
// an extra property name to repeat).
inline std::string text_violation(const nlohmann::ordered_json& schema, const std::string& text,
                                  bool allow_duplicate_keys = false) {
    using json = nlohmann::ordered_json;
    std::vector<std::set<std::string>> open_objects;  // the keys seen in each enclosing object
    std::string duplicate;
    const json::parser_callback_t watch_keys = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        if (event == json::parse_event_t::object_end) open_objects.pop_back();
        if (event == json::parse_event_t::key &&
            !open_objects.back().insert(parsed.get<std::string>()).second) {
            duplicate = parsed.get<std::string>();
        }
        return true;
    };
    json value;
    try {
        value = json::parse(text, watch_keys);
    } catch (const nlohmann::json::parse_error& e) {
        return std::string("not JSON: ") + e.what();
    } catch (const nlohmann::json::out_of_range&) {
        return kNotJudged;
    }
    if (!duplicate.empty() && !allow_duplicate_keys) {
        return "an object has the key \"" + duplicate + "\" twice";
    }
    return schema_violation(schema, value);
}

}  // namespace servelab::test
