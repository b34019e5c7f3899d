// random_json_schema.h — random JSON schemas in the converter's supported
// subset, for property tests.
//
// Lab 12 test support (chapter 11.6, constrained decoding). A schema is
// drawn top-down: objects (0 to 4 properties, a random subset required,
// sometimes a required name that is not listed, additionalProperties absent,
// false or a schema), arrays (items, prefixItems, minItems / maxItems),
// strings (lengths, enum, a simple pattern, format date or uuid), integers
// (bounds), numbers, booleans, null, enums of mixed values, anyOf and oneOf
// of different types, and now and then a $ref to a definition. Below
// `max_depth` only scalars are drawn, so a schema stays small. Every
// keyword drawn is one both the converter (json_schema_grammar.h) and the
// validator oracle (json_schema_validator_oracle.h) support.
#pragma once

#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

namespace servelab::test {

class RandomJsonSchema {
  public:
    using json = nlohmann::ordered_json;

    explicit RandomJsonSchema(std::mt19937_64& rng) : rng_(rng) {}

    // A whole schema, its root an object or an array most of the time (as
    // a response format is), with a $defs entry when one was drawn.
    json draw(int max_depth = 3) {
        defs_ = json::object();
        json schema = pick(4) == 0   ? any(max_depth)
                      : pick(3) == 0 ? array(max_depth)
                                     : object(max_depth);
        if (!defs_.empty()) schema["$defs"] = defs_;
        return schema;
    }

  private:
    size_t pick(size_t n) { return size_t(rng_() % n); }
    int64_t between(int64_t low, int64_t high) {
        return low + int64_t(pick(size_t(high - low + 1)));
    }

    json any(int depth) {
        if (depth <= 0) return scalar();
        switch (pick(9)) {
            case 0:
            case 1:
                return object(depth);
            case 2:
            case 3:
                return array(depth);
            case 4:
                return any_of(depth);
            case 5:
                return definition(depth);
            default:
                return scalar();
        }
    }

    json scalar() {
        switch (pick(8)) {
            case 0:
                return string_schema();
            case 1:
                return integer_schema();
            case 2:
                return json{{"type", "number"}};
            case 3:
                return json{{"type", "boolean"}};
            case 4:
                return json{{"type", "null"}};
            case 5:
                return enum_schema();
            case 6:
                return json{{"type", json::array({"string", "integer"})}};
            default:
                return pick(2) ? string_schema() : integer_schema();
        }
    }

    json string_schema() {
        json s = {{"type", "string"}};
        switch (pick(5)) {
            case 0:
                s["minLength"] = between(0, 3);
                break;
            case 1:
                s["maxLength"] = between(0, 6);
                break;
            case 2:
                s["pattern"] = pick(2) ? "^[a-c]+$" : "^x[0-9]{2}$";
                break;
            case 3:
                s["format"] = pick(2) ? "date" : "uuid";
                break;
            default:
                break;
        }
        if (s.contains("minLength") && pick(2))
            s["maxLength"] = s["minLength"].get<int64_t>() + between(0, 4);
        return s;
    }

    json integer_schema() {
        json s = {{"type", "integer"}};
        if (pick(2)) s["minimum"] = between(-20, 5);
        if (pick(2)) s["maximum"] = s.value("minimum", int64_t(-20)) + between(0, 300);
        if (pick(5) == 0) s["exclusiveMaximum"] = s.value("maximum", int64_t(0)) + 1000;
        return s;
    }

    json enum_schema() {
        const json pool = json::array(
            {"red", "green", 1, 2.5, true, nullptr, "é", json::array({1}), json{{"k", "v"}}});
        json values = json::array();
        const size_t n = 1 + pick(4);
        for (size_t i = 0; i < n; ++i) values.push_back(pool[pick(pool.size())]);
        if (pick(4) == 0) return json{{"const", values[0]}};
        return json{{"enum", values}};
    }

    json object(int depth) {
        static const char* const kNames[] = {"id", "name", "tags", "a", "b c", "é", "n\"q"};
        json s = {{"type", "object"}, {"properties", json::object()}};
        json required = json::array();
        const size_t n = pick(5);
        std::vector<size_t> order = {0, 1, 2, 3, 4, 5, 6};
        std::shuffle(order.begin(), order.end(), rng_);
        for (size_t i = 0; i < n; ++i) {
            const std::string name = kNames[order[i]];
            s["properties"][name] = any(depth - 1);
            if (pick(2)) required.push_back(name);
        }
        switch (pick(3)) {
            case 0:
                s["additionalProperties"] = false;
                break;
            case 1:
                s["additionalProperties"] = scalar();
                break;
            default:
                break;  // absent: any extra property
        }
        if (pick(6) == 0 && s.value("additionalProperties", json(true)) != json(false)) {
            required.push_back(
                "extra");  // required, not listed: its value follows additionalProperties
        }
        if (!required.empty()) s["required"] = required;
        return s;
    }

    json array(int depth) {
        json s = {{"type", "array"}};
        if (pick(3) == 0) {
            s["prefixItems"] = json::array();
            for (size_t k = 0, n = 1 + pick(2); k < n; ++k)
                s["prefixItems"].push_back(any(depth - 1));
        }
        const size_t rest = pick(4);
        if (rest == 0 && s.contains("prefixItems")) s["items"] = false;
        if (rest >= 2) s["items"] = any(depth - 1);
        if (pick(2)) s["minItems"] = between(0, 2);
        if (pick(2)) s["maxItems"] = s.value("minItems", int64_t(0)) + between(0, 3);
        return s;
    }

    // Branches of different types, so oneOf's are disjoint too.
    json any_of(int depth) {
        json branches = json::array({pick(2) ? string_schema() : json{{"type", "null"}},
                                     pick(2) ? object(depth - 1) : integer_schema()});
        return json{{pick(2) ? "anyOf" : "oneOf", branches}};
    }

    json definition(int depth) {
        const std::string name = "d" + std::to_string(defs_.size());
        defs_[name] = true;  // taken before drawing: a definition drawn inside gets another name
        defs_[name] = any(depth - 1);
        return json{{"$ref", "#/$defs/" + name}};
    }

    std::mt19937_64& rng_;
    json defs_;
};

}  // namespace servelab::test
