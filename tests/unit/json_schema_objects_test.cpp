// json_schema_objects_test.cpp — Lab 12's objects and arrays: the grammar
// of a schema accepts exactly the texts a validator accepts (in the
// converter's documented subset: properties in schema order, extra ones
// after them).
//
// Lab 12 (chapter 11.6, constrained decoding), the exercise in
// reference/constrained/json_schema_objects.cpp. Each test builds many
// small schemas, writes every text of a family (each subset of the
// properties, each element count, values that fit and values that do not)
// and compares the grammar's answer (the Earley oracle, grammar_oracle.h)
// with an independent validator's (json_schema_validator_oracle.h). A
// disagreement names the mistake that causes it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "reference/constrained/json_schema_grammar.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/json_schema_validator_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;
using test::grammar_accepts;

// A property kind: its schema, a value that validates and one that does not.
struct Kind {
    json schema;
    std::string valid, invalid;
};

const std::vector<Kind>& kinds() {
    static const std::vector<Kind> all = {
        {{{"type", "integer"}}, "12", "\"12\""},
        {{{"type", "string"}}, "\"s\"", "3"},
        {{{"type", "boolean"}}, "true", "null"},
        {{{"type", "array"}, {"items", {{"type", "integer"}}}}, "[1,2]", "[\"x\"]"},
        {{{"type", "object"}, {"properties", {{"x", {{"type", "integer"}}}}}, {"required", {"x"}}},
         "{\"x\":1}",
         "{}"},
    };
    return all;
}

const char* const kNames[] = {"id", "name", "ok", "tags", "pos"};

// Why the grammar and the validator disagree on an object text, in the
// student's terms.
std::string object_mistake(bool grammar_says, const std::string& violation,
                           const std::string& text) {
    if (grammar_says) {
        if (violation.find("required") != std::string::npos) {
            return "the grammar accepts an object that leaves out a required property: a "
                   "required member must always be written (only optional ones get the "
                   "alternative that skips them)";
        }
        if (violation.find("additionalProperties") != std::string::npos) {
            return "the grammar accepts an extra property that additionalProperties refuses";
        }
        return "the grammar accepts a value its property's schema refuses";
    }
    if (text.find("\"zz\"") != std::string::npos) {
        return "the grammar refuses an extra property after the listed ones, which "
               "additionalProperties allows (extra_member_rules' pick and after rules must "
               "follow the last member)";
    }
    return "the grammar refuses a valid object: an optional property must be skippable "
           "wherever it stands (its pick rule may go on to the next member's pick), the object "
           "may end after the last required member, and the first member written takes no "
           "comma, whichever it is";
}

// The members of `props` picked by `subset` (bit i: property i), in schema
// order, with member `bad` (an index into the picked ones; -1: none) given
// an invalid value, then an extra member "zz" when `extra` is 1 (a valid
// extra value: an integer) or 2 (a string).
std::string object_text(const std::vector<int>& props, unsigned subset, int bad, int extra,
                        bool spaced) {
    std::string text = "{";
    const std::string comma = spaced ? ", " : ",";
    int written = 0;
    for (size_t i = 0; i < props.size(); ++i) {
        if (!(subset >> i & 1)) continue;
        const Kind& kind = kinds()[size_t(props[i])];
        if (written > 0) text += comma;
        text += std::string("\"") + kNames[i] + "\":" + (spaced ? " " : "") +
                (written == bad ? kind.invalid : kind.valid);
        ++written;
    }
    if (extra > 0) text += (written > 0 ? comma : "") + "\"zz\":" + (extra == 1 ? "7" : "\"7\"");
    return text + "}";
}

// For one object schema: every text of object_text's family, grammar against validator.
void check_object_family(const json& schema, const std::vector<int>& props,
                         test::RandomSource& random) {
    const Grammar g = json_schema_grammar(schema);
    for (unsigned subset = 0; subset < (1u << props.size()); ++subset) {
        const int written = __builtin_popcount(subset);
        for (int bad = -1; bad < written; ++bad) {
            for (int extra = 0; extra <= 2; ++extra) {
                const bool spaced = random.integer(0, 3) == 0;
                const std::string text = object_text(props, subset, bad, extra, spaced);
                const std::string violation = test::text_violation(schema, text);
                const bool grammar_says = grammar_accepts(g, text);
                if (grammar_says == violation.empty()) continue;
                FAIL() << object_mistake(grammar_says, violation, text)
                       << ".\n  schema: " << schema.dump() << "\n  text: " << text << "\n  grammar "
                       << (grammar_says ? "accepts" : "refuses") << ", the validator says "
                       << (violation.empty() ? "valid" : violation) << "; " << random.trace();
            }
        }
    }
}

json object_schema(const std::vector<int>& props, unsigned required, const json& additional) {
    json schema = {{"type", "object"}, {"properties", json::object()}};
    json names = json::array();
    for (size_t i = 0; i < props.size(); ++i) {
        schema["properties"][kNames[i]] = kinds()[size_t(props[i])].schema;
        if (required >> i & 1) names.push_back(kNames[i]);
    }
    if (!names.empty()) schema["required"] = names;
    if (!additional.is_null()) schema["additionalProperties"] = additional;
    return schema;
}

// ---------------------------------------------------------------- objects

TEST(SchemaObjects, RequiredPropertiesAreAlwaysWritten) {
    test::RandomSource random;
    for (size_t n = 1; n <= 4; ++n) {
        for (unsigned required = 1; required < (1u << n); ++required) {
            std::vector<int> props;
            for (size_t i = 0; i < n; ++i) props.push_back(int(random.integer(0, 4)));
            check_object_family(object_schema(props, required, json(false)), props, random);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(SchemaObjects, OptionalPropertiesMayEachBeLeftOut) {
    test::RandomSource random;
    for (size_t n = 0; n <= 4; ++n) {
        std::vector<int> props;
        for (size_t i = 0; i < n; ++i) props.push_back(int(i % 5));
        // None required, then only the last, then only the first.
        for (const unsigned required : {0u, n ? 1u << (n - 1) : 0u, n ? 1u : 0u}) {
            check_object_family(object_schema(props, required, json(false)), props, random);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(SchemaObjects, ExtraPropertiesFollowTheListedOnes) {
    test::RandomSource random;
    const json additional[] = {json(), json(true), json{{"type", "integer"}}, json(false)};
    for (size_t n = 0; n <= 3; ++n) {
        for (const json& extra : additional) {
            std::vector<int> props;
            for (size_t i = 0; i < n; ++i) props.push_back(int(random.integer(0, 4)));
            const unsigned required = unsigned(random.integer(0, (1 << n) - 1));
            check_object_family(object_schema(props, required, extra), props, random);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(SchemaObjects, CommasStandExactlyBetweenMembers) {
    const json schema = object_schema({0, 0, 0}, 0, json(false));
    const Grammar g = json_schema_grammar(schema);
    const std::vector<std::pair<std::string, std::string>> wrong = {
        {"{,\"id\":12}", "a comma before the first member"},
        {"{,\"name\":12}", "a comma before the first member written (the first was skipped)"},
        {"{\"id\":12,}", "a comma after the last member"},
        {"{\"id\":12,,\"ok\":12}", "two commas where a member was skipped"},
        {"{\"id\":12 \"ok\":12}", "no comma between two members"},
        {"{\"name\":12\"ok\":12}", "no comma between two members after a skipped one"},
        {"{\"ok\":12,\"id\":12}", "members out of the schema's order"},
        {"{\"id\":12,\"id\":12}", "a member written twice"},
    };
    for (const auto& [text, mistake] : wrong) {
        EXPECT_FALSE(grammar_accepts(g, text)) << "the grammar accepts " << text << ": " << mistake
                                               << " (schema " << schema.dump() << ")";
    }
    for (const char* text :
         {"{}", "{\"name\":12}", "{\"ok\":12}", "{\"name\":12,\"ok\":12}", "{ \"id\": 12 }"}) {
        EXPECT_TRUE(grammar_accepts(g, text))
            << "the grammar refuses " << text
            << ": the first member written takes no comma, whichever it is, and every later one "
               "exactly one (schema "
            << schema.dump() << ")";
    }
}

TEST(SchemaObjects, AnObjectWhoseRequiredPropertyValidatesNothingValidatesNothing) {
    // Required and false: no object validates, so the whole schema refuses.
    EXPECT_THROW(json_schema_grammar(json::parse(
                     R"({"type": "object", "properties": {"a": false}, "required": ["a"]})")),
                 SchemaError)
        << "object_rule must return kNoValue when object_members finds nothing can validate";
    // As a branch of anyOf it drops out, leaving the other.
    const Grammar g = json_schema_grammar(json::parse(
        R"({"anyOf": [{"type": "object", "properties": {"a": false}, "required": ["a"]},
                      {"type": "integer"}]})"));
    EXPECT_TRUE(grammar_accepts(g, "3"));
    EXPECT_FALSE(grammar_accepts(g, "{}")) << "an object that validates nothing was allowed";
    EXPECT_FALSE(grammar_accepts(g, "{\"a\":1}")) << "an object that validates nothing was allowed";
}

TEST(SchemaObjects, NestedObjectsAndRequiredNamesNotListed) {
    test::RandomSource random;
    const json schema = json::parse(R"({"type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"},
                                                               "c": {"type": "string"}},
                             "required": ["c"], "additionalProperties": false}},
        "required": ["a", "id"], "additionalProperties": {"type": "integer"}})");
    const Grammar g = json_schema_grammar(schema);
    for (const char* text :
         {"{\"a\":{\"c\":\"s\"},\"id\":1}", "{\"a\":{\"b\":2,\"c\":\"s\"},\"id\":1,\"zz\":3}",
          "{\"a\":{\"b\":2},\"id\":1}", "{\"a\":{\"c\":\"s\"}}", "{\"id\":1}",
          "{\"a\":{\"c\":\"s\"},\"id\":\"x\"}", "{\"a\":{\"c\":\"s\",\"d\":1},\"id\":1}"}) {
        const std::string violation = test::text_violation(schema, text);
        EXPECT_EQ(grammar_accepts(g, text), violation.empty())
            << object_mistake(grammar_accepts(g, text), violation, text) << ": " << text
            << " (validator: " << (violation.empty() ? "valid" : violation) << ")";
    }
}

// A keyword the converter refuses, deep inside an object or an array, is
// named by its whole path: each rule passes its own path on to the values
// it converts (child_path(path, "additionalProperties"), ...).
TEST(SchemaObjects, ARefusedKeywordInsideNamesItsPath) {
    const auto refused_at = [](const char* schema) -> std::string {
        try {
            json_schema_grammar(json::parse(schema));
        } catch (const SchemaError& e) {
            return e.keyword();
        }
        return "no error";
    };
    EXPECT_EQ(refused_at(R"({"properties": {"a": {"type": "object",
                                 "additionalProperties": {"multipleOf": 2}}}})"),
              "properties.a.additionalProperties.multipleOf")
        << "the value of additionalProperties is converted at path + \".additionalProperties\"";
    EXPECT_EQ(refused_at(R"({"type": "array", "items": {"type": "array",
                                 "prefixItems": [{"type": "integer"}, {"multipleOf": 2}]}})"),
              "items.prefixItems.1.multipleOf");
}

// ---------------------------------------------------------------- arrays

// Why the grammar and the validator disagree on an array text.
std::string array_mistake(bool grammar_says, const std::string& violation) {
    if (grammar_says) {
        if (violation.find("minItems") != std::string::npos) {
            return "the grammar accepts fewer elements than minItems: after(k) for k < minItems "
                   "must not end there (no empty alternative)";
        }
        if (violation.find("maxItems") != std::string::npos) {
            return "the grammar accepts more elements than maxItems (or than a prefix item or "
                   "items that validate nothing allow): after(limit) ends the array";
        }
        return "the grammar accepts an element that its position's schema refuses: element k "
               "follows prefixItems[k] while there is one, then items";
    }
    return "the grammar refuses a valid array: every count from minItems to maxItems (no limit: "
           "any) must be allowed, each element by its position's schema, \"[]\" when minItems is 0";
}

// Element texts: what fits the prefix schema (a string) and what fits the
// rest (an integer), and their opposites.
std::string array_text(int64_t count, size_t prefix_length, int64_t bad) {
    std::string text = "[";
    for (int64_t k = 0; k < count; ++k) {
        const bool prefix = size_t(k) < prefix_length;
        const bool wrong = k == bad;
        text += (k ? "," : "") + std::string(prefix != wrong ? "\"p\"" : "5");
    }
    return text + "]";
}

void check_array_family(const json& schema, size_t prefix_length, test::RandomSource& random) {
    Grammar g;
    try {
        g = json_schema_grammar(schema);
    } catch (const SchemaError& e) {
        // Validates nothing: then no count of elements may validate.
        for (int64_t count = 0; count <= 6; ++count) {
            ASSERT_FALSE(test::text_violation(schema, array_text(count, prefix_length, -1)).empty())
                << "the schema " << schema.dump() << " was refused (" << e.what() << "), but "
                << array_text(count, prefix_length, -1) << " validates";
        }
        return;
    }
    for (int64_t count = 0; count <= 6; ++count) {
        for (int64_t bad = -1; bad < count; ++bad) {
            const std::string text = array_text(count, prefix_length, bad);
            const std::string violation = test::text_violation(schema, text);
            const bool grammar_says = grammar_accepts(g, text);
            ASSERT_EQ(grammar_says, violation.empty())
                << array_mistake(grammar_says, violation) << ".\n  schema: " << schema.dump()
                << "\n  text: " << text << "\n  the validator says "
                << (violation.empty() ? "valid" : violation) << "; " << random.trace();
        }
    }
}

TEST(SchemaArrays, MinItemsAndMaxItemsExhaustively) {
    test::RandomSource random;
    for (int64_t min = -1; min <= 4; ++min) {
        for (int64_t max = -1; max <= 5; ++max) {
            json schema = {{"type", "array"}, {"items", {{"type", "integer"}}}};
            if (min >= 0) schema["minItems"] = min;
            if (max >= 0) schema["maxItems"] = max;
            check_array_family(schema, 0, random);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(SchemaArrays, PrefixItemsThenItems) {
    test::RandomSource random;
    const json rests[] = {json(), json(false), json{{"type", "integer"}}};
    for (size_t prefix = 0; prefix <= 3; ++prefix) {
        for (const json& rest : rests) {
            for (int64_t min = -1; min <= 4; min += 1 + random.integer(0, 1)) {
                for (int64_t max = -1; max <= 4; max += 1 + random.integer(0, 1)) {
                    json schema = {{"type", "array"}};
                    if (prefix > 0) {
                        schema["prefixItems"] = json::array();
                        for (size_t k = 0; k < prefix; ++k) {
                            schema["prefixItems"].push_back({{"type", "string"}});
                        }
                    }
                    if (!rest.is_null()) schema["items"] = rest;
                    if (min >= 0) schema["minItems"] = min;
                    if (max >= 0) schema["maxItems"] = max;
                    // No items: any value may follow; the text's integers validate.
                    check_array_family(schema, prefix, random);
                    if (HasFatalFailure()) return;
                }
            }
        }
    }
}

TEST(SchemaArrays, APrefixItemThatValidatesNothingEndsTheArrayBeforeIt) {
    test::RandomSource random;
    for (size_t cut = 0; cut <= 2; ++cut) {
        for (int64_t min = -1; min <= 3; ++min) {
            json schema = {{"type", "array"},
                           {"prefixItems", json::array()},
                           {"items", {{"type", "integer"}}}};
            for (size_t k = 0; k <= 2; ++k) {
                schema["prefixItems"].push_back(k == cut ? json(false) : json{{"type", "string"}});
            }
            if (min >= 0) schema["minItems"] = min;
            check_array_family(schema, 3, random);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(SchemaArrays, OlderDraftsItemsListAndAdditionalItems) {
    test::RandomSource random;
    const json rests[] = {json(), json(false), json{{"type", "integer"}}};
    for (const json& rest : rests) {
        for (int64_t max = -1; max <= 3; ++max) {
            json schema = {{"type", "array"},
                           {"items", json::array({{{"type", "string"}}, {{"type", "string"}}})}};
            if (!rest.is_null()) schema["additionalItems"] = rest;
            if (max >= 0) schema["maxItems"] = max;
            check_array_family(schema, 2, random);
            if (HasFatalFailure()) return;
        }
    }
}

TEST(SchemaArrays, CommasAndWhitespaceBetweenElements) {
    const json schema = json::parse(R"({"type": "array", "items": {"type": "integer"}})");
    const Grammar g = json_schema_grammar(schema);
    for (const char* text : {"[,1]", "[1,]", "[1,,2]", "[1 2]", "[,]"}) {
        EXPECT_FALSE(grammar_accepts(g, text))
            << "the grammar accepts " << text
            << ": elements are separated by exactly one comma, none before the first or after "
               "the last";
    }
    for (const char* text : {"[]", "[ ]", "[ 1 ]", "[1, 2]", "[\n  1,\n  2\n]"}) {
        EXPECT_TRUE(grammar_accepts(g, text))
            << "the grammar refuses " << text
            << ": whitespace (ws) may stand after \"[\", around each element and after each comma";
    }
}

TEST(SchemaArrays, NestedArrays) {
    test::RandomSource random;
    const json schema = json::parse(R"({"type": "array", "minItems": 1, "maxItems": 2,
        "items": {"type": "array", "prefixItems": [{"type": "integer"}], "items": false}})");
    const Grammar g = json_schema_grammar(schema);
    for (const char* text :
         {"[[1]]", "[[],[2]]", "[]", "[[1],[2],[3]]", "[[1,2]]", "[[\"a\"]]", "[1]"}) {
        const std::string violation = test::text_violation(schema, text);
        EXPECT_EQ(grammar_accepts(g, text), violation.empty())
            << array_mistake(grammar_accepts(g, text), violation) << ": " << text
            << " (validator: " << (violation.empty() ? "valid" : violation) << ")";
    }
}

}  // namespace
}  // namespace servelab
