// json_schema_grammar_test.cpp — JSON Schema to grammar (json_schema_grammar.h),
// keyword by keyword, judged by the Earley oracle (grammar_oracle.h).
//
// Lab 12 (chapter 11.6, constrained decoding). Each keyword: texts the
// schema validates that the grammar must accept, and texts it must reject
// (invalid ones, and valid ones outside the grammar's documented subset:
// other property orders, runaway whitespace). Integer ranges are checked
// exhaustively over small ranges and at random over 64-bit ones, against
// the numbers themselves; dates against a calendar computed here. Every
// refused keyword must name itself and its path. The Python side
// (tests/e2e/test_json_schema_grammar.py) checks samples against jsonschema.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "reference/constrained/grammar_sampler.h"
#include "reference/constrained/json_schema_grammar.h"
#include "tests/unit/grammar_oracle.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;
using test::grammar_accepts;

Grammar grammar_of(const std::string& schema) {
    return json_schema_grammar(json::parse(schema));
}

// Each of `valid` accepted and each of `invalid` rejected by the grammar of `schema`.
void expect_language(const std::string& schema, const std::vector<std::string>& valid,
                     const std::vector<std::string>& invalid) {
    const Grammar g = grammar_of(schema);
    for (const std::string& text : valid) {
        EXPECT_TRUE(grammar_accepts(g, text)) << "schema " << schema << " rejects " << text;
    }
    for (const std::string& text : invalid) {
        EXPECT_FALSE(grammar_accepts(g, text)) << "schema " << schema << " accepts " << text;
    }
}

// The SchemaError `schema` throws (its keyword path), or "no error".
std::string refusal_of(const std::string& schema) {
    try {
        json_schema_grammar(json::parse(schema));
    } catch (const SchemaError& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        return e.keyword();
    }
    return "no error";
}

TEST(JsonSchemaGrammar, PlainTypes) {
    expect_language(R"({"type": "null"})", {"null"}, {"nul", "null ", "\"null\"", ""});
    expect_language(R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"});
    expect_language(R"({"type": "integer"})", {"0", "-0", "7", "-12", "123456789012345678901234"},
                    {"01", "1.0", "1e3", "+1", "-", "", " 1"});
    expect_language(R"({"type": "number"})", {"0", "-0.5", "3.25", "1e10", "1E-3", "-2.5e+7", "10"},
                    {".5", "1.", "01.5", "1e", "--1", "NaN", "Infinity", "0x10"});
    expect_language(R"({"type": ["string", "null"]})", {"null", "\"x\""}, {"1", "true"});
}

TEST(JsonSchemaGrammar, AnyValue) {
    const std::vector<std::string> values = {"null",
                                             "true",
                                             "-1.5e3",
                                             "\"a\\nb\"",
                                             "[]",
                                             "{}",
                                             "[1, [2, {\"a\": [null]}]]",
                                             "{\"a\": {\"b\": {}}, \"c\": [true, false]}",
                                             "{\n  \"k\": \"v\",\n  \"n\": 1\n}"};
    const std::vector<std::string> not_values = {"",         "{",     "[1,]",        "{\"a\" 1}",
                                                 "{'a': 1}", "[1 2]", "{\"a\": 1,}", "nul"};
    for (const char* schema : {"{}", "true", R"({"description": "anything"})"}) {
        expect_language(schema, values, not_values);
    }
    const Grammar object = json_object_grammar();
    EXPECT_TRUE(grammar_accepts(object, "{\"a\": [1, {}]}"));
    EXPECT_TRUE(grammar_accepts(object, "{}"));
    EXPECT_FALSE(grammar_accepts(object, "[]"));
    EXPECT_FALSE(grammar_accepts(object, "\"{}\""));
}

TEST(JsonSchemaGrammar, WhitespaceIsBounded) {
    const std::string indent20(20, ' ');
    expect_language(R"({"type": "object", "properties": {"a": {"type": "integer"}}})",
                    {"{\"a\":1}", "{ \"a\" : 1 }", "{\n  \"a\": 1\n}", "{\n\t\"a\": 1\n}",
                     "{\n" + indent20 + "\"a\": 1\n}"},
                    {" {\"a\":1}", "{\"a\":1}\n", "{  \"a\":1}", "{\n\n\"a\":1}",
                     "{\n" + indent20 + " \"a\": 1}", "{\r\n\"a\":1}", "{\"a\":1 \n}"});
}

TEST(JsonSchemaGrammar, StringCharactersAndEscapes) {
    expect_language(R"({"type": "string"})",
                    {"\"\"", "\"plain\"", "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"",
                     "\"\\u00e9\\u00E9\"", "\"\\ud83d\\ude00\"", "\"é ∑ 😀\"", "\"\x7f\""},
                    {"\"", "\"a", "'a'", "\"\\x41\"", "\"\\u12\"", "\"\\ud83d\"", "\"\\ude00\"",
                     "\"\\ud83d\\u0041\"", "\"a\nb\"", std::string("\"\0\"", 3), "\"\xff\"",
                     "\"\xc3\"", "\"\xed\xa0\x80\""});
}

TEST(JsonSchemaGrammar, StringLengthCountsCharacters) {
    // Every string of 0..7 characters, each written raw or as one of the
    // escapes (one character each, a surrogate pair too), against min/max.
    const std::vector<std::string> spellings = {"a",   "é", "😀", "\\n", "\\u0041", "\\ud83d\\ude00",
                                                "\\\""};
    test::RandomSource random;
    for (int64_t min = 0; min <= 4; ++min) {
        for (int64_t max = min; max <= 5; ++max) {
            const Grammar g =
                grammar_of(json{{"type", "string"}, {"minLength", min}, {"maxLength", max}}.dump());
            for (int length = 0; length <= 7; ++length) {
                std::string text = "\"";
                for (int k = 0; k < length; ++k) {
                    text += spellings[size_t(random.integer(0, int64_t(spellings.size()) - 1))];
                }
                text += "\"";
                EXPECT_EQ(grammar_accepts(g, text), length >= min && length <= max)
                    << "minLength " << min << " maxLength " << max << ": " << text << " has "
                    << length << " characters; " << random.trace();
            }
        }
    }
    expect_language(R"({"minLength": 2})", {"\"ab\""}, {"\"a\"", "12"});  // inferred: a string
}

TEST(JsonSchemaGrammar, PatternSearchesUnlessAnchored) {
    expect_language(R"({"type": "string", "pattern": "^[a-z]{2,3}$"})", {"\"ab\"", "\"xyz\""},
                    {"\"a\"", "\"abcd\"", "\"AB\"", "\"ab1\""});
    expect_language(R"({"pattern": "abc"})", {"\"abc\"", "\"xxabcyy\"", "\"é abc 😀\""},
                    {"\"ab\"", "\"abd\"", "\"a\\u0062c\""});  // no escapes in a patterned string
    expect_language(R"({"pattern": "^ab"})", {"\"ab\"", "\"abz\""}, {"\"zab\""});
    expect_language(R"({"pattern": "c$"})", {"\"c\"", "\"abc\""}, {"\"cd\""});
    expect_language(R"({"pattern": "^(a|b)+\\d$"})", {"\"ab1\"", "\"b9\""}, {"\"1\"", "\"ab\""});
    // A pattern whose strings all need an escape validates nothing here.
    EXPECT_EQ(refusal_of(R"({"pattern": "^\"$"})"), "");
    expect_language(R"({"properties": {"q": {"pattern": "^\"$"}}})", {"{}"}, {"{\"q\":\"\\\"\"}"});
    // What both ECMA-262 and Python's Unicode re accept: . stops at U+2028,
    // \\S at every space either knows; \\W, \\D, and \\d in [^...] are refused.
    expect_language(R"({"pattern": "^\\S+$"})", {"\"ab\"", "\"é\""},
                    {"\"a b\"", "\"a\u00a0b\"", "\"a\u3000b\"", "\"a\ufeffb\""});
    expect_language(R"({"pattern": "^.$"})", {"\"x\"", "\"😀\""}, {"\"\u2028\"", "\"\u2029\""});
    expect_language(R"({"pattern": "^[.]$"})", {"\".\""}, {"\"x\""});
    EXPECT_EQ(refusal_of(R"({"pattern": "\\W"})"), "pattern");
    EXPECT_EQ(refusal_of(R"({"pattern": "^\\D$"})"), "pattern");
    EXPECT_EQ(refusal_of(R"({"pattern": "[^\\d]"})"), "pattern");
    EXPECT_EQ(refusal_of(R"({"pattern": "[\\S]"})"), "pattern");
    EXPECT_EQ(refusal_of(R"({"pattern": "^[\\d\\s]+$"})"), "no error");
    EXPECT_EQ(refusal_of(R"({"pattern": "^a|b$"})"), "pattern");
    EXPECT_EQ(refusal_of(R"x({"pattern": "(?=a)"})x"), "pattern");
    EXPECT_EQ(refusal_of(R"({"pattern": "a", "maxLength": 3})"), "maxLength");
}

TEST(JsonSchemaGrammar, Enum) {
    expect_language(
        R"({"enum": ["red", 1, null, [1, "x"], {"b": 1, "a": "é"}, 2.5, "say \"hi\""]})",
        {"\"red\"", "1", "null", "[1,\"x\"]", "{\"b\":1,\"a\":\"é\"}", "2.5", "\"say \\\"hi\\\"\""},
        {"\"blue\"", "2", "[1, \"x\"]", "{\"a\":\"é\",\"b\":1}", "red"});
    expect_language(R"({"const": "fixed"})", {"\"fixed\""}, {"\"other\""});
    expect_language(R"({"type": "string", "enum": ["a", 1, "b"]})", {"\"a\"", "\"b\""}, {"1"});
    expect_language(R"({"type": "integer", "enum": [1.0, 1.5, 2]})", {"2"}, {"1.5", "1.0"});
    expect_language(R"({"type": "number", "enum": [1.0, 1.5, 2]})", {"1.0", "1.5", "2"}, {});
    expect_language(R"({"type": "object", "required": ["a", "a"]})", {"{\"a\":1}"},
                    {"{\"a\":1,\"a\":2}"});
    EXPECT_EQ(refusal_of(R"({"enum": []})"), "");  // validates nothing
    EXPECT_EQ(refusal_of(R"({"enum": ["a"], "maxLength": 3})"), "maxLength");
}

TEST(JsonSchemaGrammar, ObjectPropertiesInSchemaOrder) {
    const std::string schema = R"({"type": "object", "additionalProperties": false,
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name"]})";
    expect_language(
        schema,
        {"{\"name\":\"x\"}", "{\"name\":\"x\",\"age\":3}", "{\"name\":\"x\",\"tags\":[]}",
         "{\"name\":\"x\", \"age\":3, \"tags\":[\"a\"]}"},
        {"{}", "{\"age\":3}", "{\"age\":3,\"name\":\"x\"}", "{\"name\":\"x\",}",
         "{,\"name\":\"x\"}", "{\"name\":\"x\",\"other\":1}", "{\"name\":\"x\",\"age\":\"3\"}",
         "{\"name\":\"x\" \"age\":3}"});
    // All optional: any subset, in order.
    expect_language(R"({"properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": false})",
                    {"{}", "{\"a\":1}", "{\"b\":1}", "{\"c\":1}", "{\"a\":1,\"c\":2}",
                     "{\"a\":1,\"b\":2,\"c\":3}"},
                    {"{\"c\":1,\"a\":2}", "{\"a\":1,\"a\":2}", "{\"a\":1,,\"c\":2}", "{\"d\":1}"});
}

TEST(JsonSchemaGrammar, AdditionalProperties) {
    // Default true: extra properties, with any value, after the listed ones,
    // never named like a listed one (that would be a second "a"): they start
    // with a character no listed name starts with.
    const std::string open = R"({"type": "object", "properties": {"a": {"type": "integer"},
        "ab": {"type": "integer"}}})";
    expect_language(open,
                    {"{}", "{\"x\":\"y\"}", "{\"a\":1,\"x\":[1]}", "{\"a\":1,\"ab\":2,\"b\":{}}",
                     "{\"b\":1}", "{\"\":1}", "{\"\\na\":1}", "{\"é\":null,\"zz\":2}"},
                    {"{\"x\":1,\"a\":1}", "{\"a\":1,\"a\":\"s\"}", "{\"ab\":1,\"a\":2}",
                     "{\"x\":1,\"ab\":2}", "{\"abc\":1}", "{\"a1\":1}", "{\"\\u0061\":1}"});
    expect_language(
        R"({"properties": {"é": {}, "\n": {}, "": {}}, "additionalProperties": {"const": 0}})",
        {"{\"x\":0}", "{\"\\t\":0}"},
        {"{\"x\":1}", "{\"éa\":0}", "{\"\\nb\":0}", "{\"\\u00e9\":0}"});
    // A schema for the extra values.
    expect_language(R"({"properties": {"a": {}}, "additionalProperties": {"type": "string"}})",
                    {"{\"a\":1,\"b\":\"s\",\"c\":\"t\"}"}, {"{\"b\":1}"});
    // Required but not listed: present, with the additionalProperties schema.
    expect_language(R"({"required": ["id"], "additionalProperties": {"type": "integer"}})",
                    {"{\"id\":1}", "{\"id\":1,\"x\":2}"}, {"{}", "{\"id\":\"1\"}"});
    EXPECT_EQ(refusal_of(R"({"required": ["id"], "additionalProperties": false})"), "");
    // A listed property with the schema false must be absent.
    expect_language(R"({"properties": {"a": false, "b": {}}})", {"{\"b\":1}", "{\"c\":1}"},
                    {"{\"a\":1}"});
    // Names that need escapes.
    expect_language(R"({"properties": {"say \"x\"": {"type": "integer"}}, "required": ["say \"x\""],
                        "additionalProperties": false})",
                    {"{\"say \\\"x\\\"\":1}"}, {"{\"say \\u0022x\\u0022\":1}"});
}

TEST(JsonSchemaGrammar, Arrays) {
    expect_language(R"({"type": "array", "items": {"type": "integer"}})",
                    {"[]", "[1]", "[1, 2, 3]", "[\n  1,\n  2\n]"}, {"[1,]", "[\"a\"]", "[,1]"});
    expect_language(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
                    {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]"});
    expect_language(R"({"items": [{"type": "string"}], "additionalItems": {"type": "null"}})",
                    {"[\"a\",null,null]"}, {"[\"a\",1]"});
    expect_language(R"({"prefixItems": [{"const": 1}], "minItems": 3})",
                    {"[1,2,\"x\"]", "[1,[],{},4]"}, {"[1,2]", "[2,2,2]"});
    for (int64_t min = 0; min <= 3; ++min) {
        for (int64_t max = min; max <= 4; ++max) {
            const Grammar g = grammar_of(json{
                {"items", {{"type", "integer"}}},
                {"minItems", min},
                {"maxItems", max}}.dump());
            std::string text = "[";
            for (int64_t n = 0; n <= 6; ++n) {
                EXPECT_EQ(grammar_accepts(g, text + "]"), n >= min && n <= max)
                    << "minItems " << min << " maxItems " << max << ": " << text << "]";
                text += (n == 0 ? "" : ",") + std::to_string(n);
            }
        }
    }
    EXPECT_EQ(refusal_of(R"({"minItems": 3, "maxItems": 2})"), "");
    EXPECT_EQ(refusal_of(R"({"items": false, "minItems": 1, "type": "array"})"), "");
}

TEST(JsonSchemaGrammar, RefsAndRecursion) {
    const std::string tree = R"({"type": "object", "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["value"], "additionalProperties": false})";
    expect_language(tree,
                    {"{\"value\":1}", "{\"value\":1,\"children\":[]}",
                     "{\"value\":1,\"children\":[{\"value\":2,\"children\":[{\"value\":3}]}]}"},
                    {"{\"value\":1,\"children\":[{}]}", "{\"children\":[]}"});
    const std::string defs = R"({"$defs": {
        "node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/link"}},
                 "additionalProperties": false},
        "link": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
        "name": {"type": "string"}},
      "definitions": {"id": {"type": "integer"}},
      "type": "object", "properties": {"head": {"$ref": "#/$defs/link"},
                                       "name": {"$ref": "#/$defs/name"},
                                       "id": {"$ref": "#/definitions/id"}},
      "additionalProperties": false})";
    expect_language(defs,
                    {"{\"head\":null}", "{\"head\":{\"next\":{\"next\":null}}}", "{\"name\":\"n\"}",
                     "{\"id\":5}"},
                    {"{\"head\":{\"next\":1}}", "{\"name\":5}", "{\"id\":\"5\"}"});
    // Built once: a definition used twice is one rule.
    const Grammar g = grammar_of(defs);
    int link_rules = 0;
    for (size_t r = 0; r < g.num_rules(); ++r)
        link_rules += g.rule_name(int32_t(r)) == "$defs.link-ref";
    EXPECT_EQ(link_rules, 1) << g.to_string();
    EXPECT_EQ(refusal_of(R"({"$ref": "#/$defs/missing"})"), "$ref");
    EXPECT_EQ(refusal_of(R"({"properties": {"a": {"$ref": "other.json#/x"}}})"),
              "properties.a.$ref");
}

TEST(JsonSchemaGrammar, AnyOfOneOfAllOf) {
    expect_language(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})",
                    {"1", "\"a\""}, {"\"ab\"", "null"});
    // Disjoint oneOf: by type, by listed values, by a discriminator.
    expect_language(R"({"oneOf": [{"type": "integer"}, {"type": "string"}]})", {"1", "\"a\""}, {});
    expect_language(R"({"oneOf": [{"enum": [1, 2]}, {"const": 3}]})", {"1", "3"}, {"4"});
    const std::string pets = R"({"oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}],
        "$defs": {
          "cat": {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
                  "required": ["kind"], "additionalProperties": false},
          "dog": {"type": "object", "properties": {"kind": {"enum": ["dog"]}, "good": {"type": "boolean"}},
                  "required": ["kind"], "additionalProperties": false}}})";
    expect_language(pets, {"{\"kind\":\"cat\",\"lives\":9}", "{\"kind\":\"dog\",\"good\":true}"},
                    {"{\"kind\":\"cat\",\"good\":true}"});
    EXPECT_EQ(refusal_of(R"({"oneOf": [{"type": "number"}, {"type": "integer"}]})"), "oneOf");
    EXPECT_EQ(refusal_of(R"({"oneOf": [{"minLength": 1}, {"maxLength": 3}]})"), "oneOf");
    // allOf: a base object extended; a part's additionalProperties false
    // forbids what only the other part lists.
    expect_language(R"({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                  {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
                    {"{\"a\":1,\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\",\"c\":1}"},
                    {"{\"a\":1}", "{\"b\":\"x\",\"a\":1}"});
    // additionalProperties beside allOf sees no properties (they are in the
    // parts): "a" is extra, so forbidden, and required: nothing validates.
    EXPECT_EQ(refusal_of(R"({"allOf": [{"properties": {"a": {}}, "required": ["a"]}],
                             "additionalProperties": false})"),
              "");
    expect_language(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
                                  {"properties": {"b": {}}}]})",
                    {"{\"a\":1}", "{}"}, {"{\"b\":1}", "{\"a\":1,\"b\":1}"});
    expect_language(R"({"allOf": [{"type": ["integer", "string"]}, {"type": ["integer", "null"]},
                                  {"minimum": 3}, {"maximum": 5}]})",
                    {"3", "5"}, {"2", "6", "\"a\"", "null"});
    // $ref with a sibling, and anyOf distributed over allOf.
    expect_language(R"({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "maximum": 2})",
                    {"2", "-7"}, {"3"});
    expect_language(R"({"type": "object", "required": ["a"],
                        "anyOf": [{"properties": {"a": {"const": 1}}}, {"properties": {"a": {"const": 2}}}]})",
                    {"{\"a\":1}", "{\"a\":2}"}, {"{\"a\":3}", "{}"});
    EXPECT_EQ(refusal_of(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})"), "pattern");
    EXPECT_EQ(refusal_of(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})"), "");
}

// Whether y-m-d is a day of the Gregorian calendar (years 1 to 9999).
bool is_real_date(int y, int m, int d) {
    static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || y > 9999 || m < 1 || m > 12 || d < 1) return false;
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= kDays[m - 1] + (m == 2 && leap ? 1 : 0);
}

TEST(JsonSchemaGrammar, FormatDateIsTheCalendar) {
    const Grammar g = grammar_of(R"({"type": "string", "format": "date"})");
    for (const int year : {0, 1, 4, 100, 400, 1900, 1996, 2000, 2023, 2024, 2100, 9996, 9999}) {
        for (int month = 0; month <= 13; ++month) {
            for (int day = 0; day <= 32; ++day) {
                char text[32];
                std::snprintf(text, sizeof text, "\"%04d-%02d-%02d\"", year, month, day);
                EXPECT_EQ(grammar_accepts(g, text), is_real_date(year, month, day)) << text;
            }
        }
    }
    EXPECT_FALSE(grammar_accepts(g, "\"2024-1-01\""));
    EXPECT_FALSE(grammar_accepts(g, "\"20240-01-01\""));
}

TEST(JsonSchemaGrammar, FormatsTimeEmailUuid) {
    expect_language(R"({"format": "time"})",
                    {"\"00:00:00Z\"", "\"23:59:59.123456789+05:30\"", "\"12:30:00-00:00\""},
                    {"\"24:00:00Z\"", "\"12:60:00Z\"", "\"12:00:60Z\"", "\"12:00:00\"",
                     "\"12:00:00.Z\"", "\"12:00:00.1234567890Z\"", "\"12:00:00z\""});
    expect_language(R"({"format": "date-time"})",
                    {"\"2024-02-29T23:59:59Z\"", "\"1999-12-31T00:00:00.5+01:00\""},
                    {"\"2023-02-29T00:00:00Z\"", "\"2024-01-01 00:00:00Z\"", "\"2024-01-01\""});
    expect_language(
        R"({"format": "email"})",
        {"\"a@b.co\"", "\"first.last+tag@mail.example-1.org\"", "\"x_y!#$%&'*/=?^`{|}~-@a.b\""},
        {"\"a@b\"", "\"@b.co\"", "\"a@.co\"", "\"a..b@c.d\"", "\".a@b.c\"", "\"a@-b.c\"",
         "\"a@b-.c\"", "\"a b@c.d\"", "\"a@b.c.\""});
    expect_language(
        R"({"format": "uuid"})",
        {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"ABCDEF01-2345-6789-ABCD-EF0123456789\""},
        {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""});
    expect_language(R"({"format": "uri"})",
                    {"\"https://example.com\"", "\"http://a.b:8080/x/y%20z?q=1&r=a/b?#frag:@\"",
                     "\"git+ssh://host.example/~user/repo.git\"", "\"s://h/\""},
                    {"\"example.com\"", "\"https:/x\"", "\"https://\"", "\"1http://a\"",
                     "\"http://a b\"", "\"http://a/%2\"", "\"http://a/#x#y\"", "\"http://a/[x]\""});
    EXPECT_EQ(refusal_of(R"({"properties": {"u": {"format": "hostname"}}})"),
              "properties.u.format");
    EXPECT_EQ(refusal_of(R"({"format": "date", "maxLength": 10})"), "maxLength");
}

// The decimal strings of integers around [low, high], against the bounds.
void check_integer_range(const std::string& schema, int64_t low, int64_t high,
                         const std::vector<int64_t>& values) {
    const Grammar g = grammar_of(schema);
    for (const int64_t v : values) {
        EXPECT_EQ(grammar_accepts(g, std::to_string(v)), v >= low && v <= high)
            << schema << " on " << v;
    }
}

TEST(JsonSchemaGrammar, IntegerRangesExhaustively) {
    const std::vector<int64_t> bounds = {-1000, -101, -100, -99, -10, -9,  -1,  0,   1,
                                         9,     10,   99,   100, 101, 123, 999, 1000};
    std::vector<int64_t> values;
    for (int64_t v = -130; v <= 130; ++v) values.push_back(v);
    for (const int64_t b : bounds) {
        for (int64_t d = -2; d <= 2; ++d) values.push_back(b + d);
    }
    for (const int64_t v : {-99999, -1099, 1099, 99999}) values.push_back(v);
    for (const int64_t low : bounds) {
        for (const int64_t high : bounds) {
            if (low > high) continue;
            check_integer_range(
                json{{"type", "integer"}, {"minimum", low}, {"maximum", high}}.dump(), low, high,
                values);
        }
        check_integer_range(json{{"type", "integer"}, {"minimum", low}}.dump(), low, INT64_MAX,
                            values);
        check_integer_range(json{{"type", "integer"}, {"exclusiveMaximum", low}}.dump(), INT64_MIN,
                            low - 1, values);
    }
    const Grammar g = grammar_of(R"({"type": "integer", "minimum": -5, "maximum": 5})");
    for (const char* text : {"-0", "00", "01", "+1", "1.0", "-05"}) {
        EXPECT_FALSE(grammar_accepts(g, text)) << text;
    }
}

TEST(JsonSchemaGrammar, IntegerBoundForms) {
    check_integer_range(R"({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 6})", 3,
                        5, {1, 2, 3, 5, 6, 7});
    check_integer_range(R"({"type": "integer", "minimum": 2.5, "maximum": 6.5})", 3, 6,
                        {2, 3, 6, 7});
    check_integer_range(R"({"type": "integer", "exclusiveMinimum": 2.5, "exclusiveMaximum": 6.0})",
                        3, 5, {2, 3, 5, 6});
    check_integer_range(R"({"type": "integer", "minimum": 2, "exclusiveMinimum": true,
                            "maximum": 6, "exclusiveMaximum": false})",
                        3, 6, {2, 3, 6, 7});  // draft 4
    EXPECT_EQ(refusal_of(R"({"type": "integer", "minimum": 5, "maximum": 4})"), "");
    EXPECT_EQ(refusal_of(R"({"type": "integer", "minimum": 1e30})"), "minimum");
    EXPECT_EQ(refusal_of(R"({"type": "number", "minimum": 0})"), "minimum");
    EXPECT_EQ(refusal_of(R"({"properties": {"p": {"maximum": 1}}})"), "properties.p.maximum");
}

TEST(JsonSchemaGrammar, IntegerRangesAt64Bits) {
    test::RandomSource random;
    std::mt19937_64& rng = random.engine();
    const auto near = [&](int64_t x) {
        const int64_t d = random.integer(-3, 3);
        return (d > 0 && x > INT64_MAX - d) || (d < 0 && x < INT64_MIN - d) ? x : x + d;
    };
    for (int round = 0; round < 40; ++round) {
        // Any 64-bit value, of any magnitude.
        int64_t low = int64_t(rng()) >> random.integer(0, 63);
        int64_t high = int64_t(rng()) >> random.integer(0, 63);
        if (low > high) std::swap(low, high);
        std::vector<int64_t> values = {low, high, near(low), near(high), INT64_MIN, INT64_MAX, 0};
        for (int k = 0; k < 20; ++k) values.push_back(int64_t(rng()) >> random.integer(0, 63));
        const std::string schema =
            json{{"type", "integer"}, {"minimum", low}, {"maximum", high}}.dump();
        SCOPED_TRACE(random.trace());
        check_integer_range(schema, low, high, values);
    }
    // The unsigned top: 2^64 - 1 and beyond.
    const Grammar g = grammar_of(R"({"type": "integer", "minimum": 18446744073709551614})");
    EXPECT_TRUE(grammar_accepts(g, "18446744073709551614"));
    EXPECT_TRUE(grammar_accepts(g, "18446744073709551615"));
    EXPECT_TRUE(grammar_accepts(g, "100000000000000000000"));
    EXPECT_FALSE(grammar_accepts(g, "18446744073709551613"));
    EXPECT_FALSE(grammar_accepts(g, "9999999999999999999"));
}

TEST(JsonSchemaGrammar, RefusedKeywordsNameThemselves) {
    for (const char* keyword :
         {"multipleOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
          "dependencies", "patternProperties", "propertyNames", "maxProperties", "contains",
          "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
          "$recursiveRef"}) {
        const json value = json::parse(R"({"type": "integer"})");
        json schema = {{"type", "object"},
                       {"properties", {{"age", {{"type", "integer"}, {keyword, value}}}}}};
        EXPECT_EQ(refusal_of(schema.dump()), std::string("properties.age.") + keyword);
        EXPECT_EQ(refusal_of(json{{"items", {{keyword, 2}}}}.dump()),
                  std::string("items.") + keyword);
    }
    EXPECT_EQ(refusal_of(R"({"uniqueItems": true})"), "uniqueItems");
    EXPECT_EQ(refusal_of(R"({"minProperties": 1})"), "minProperties");
    EXPECT_EQ(refusal_of(R"({"uniqueItems": false, "minProperties": 0})"), "no error");
    EXPECT_EQ(refusal_of(R"({"anyOf": [{}, {"multipleOf": 2}]})"), "anyOf.1.multipleOf");
    EXPECT_EQ(refusal_of(R"({"allOf": [{}, {"not": {}}]})"), "allOf.1.not");
    EXPECT_EQ(refusal_of(R"({"$defs": {"x": {"multipleOf": 2}}, "$ref": "#/$defs/x"})"),
              "$defs.x.multipleOf");
    EXPECT_EQ(refusal_of(R"({"type": "strin"})"), "type");
    EXPECT_EQ(refusal_of(R"({"properties": {"a": 3}})"), "properties.a");
    EXPECT_EQ(refusal_of(R"({"maxLength": -1})"), "maxLength");
    EXPECT_EQ(
        refusal_of(
            R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 1000000}}})"),
        "properties.a.maxLength");
}

TEST(JsonSchemaGrammar, AnnotationsAreIgnored) {
    expect_language(R"({"title": "T", "description": "D", "default": 1, "examples": [1],
                        "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x",
                        "$comment": "c", "deprecated": true, "readOnly": true, "writeOnly": false,
                        "x-vendor": {"anything": 1}, "type": "integer"})",
                    {"5"}, {"\"5\""});
}

TEST(JsonSchemaGrammar, LimitsOnHostileSchemas) {
    std::string deep = "{}";
    for (int k = 0; k < 200; ++k) deep = R"({"items": )" + deep + "}";
    EXPECT_NE(refusal_of(deep).find("items.items"), std::string::npos);
    json big_enum = json::array();
    for (int k = 0; k < 5000; ++k) big_enum.push_back(k);
    EXPECT_EQ(refusal_of(json{{"enum", big_enum}}.dump()), "enum");
    EXPECT_EQ(refusal_of(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"), "");
    // Webs of $ref that fan out: bounded work, refused.
    json fan = {{"$defs", json::object()}};
    for (int level = 0; level < 30; ++level) {
        const std::string next = "#/$defs/d" + std::to_string(level + 1);
        fan["$defs"]["d" + std::to_string(level)] =
            level == 29 ? json{{"type", "integer"}}
                        : json{{"allOf", {{{"$ref", next}}, {{"$ref", next}}, {{"$ref", next}}}}};
    }
    fan["allOf"] = {{{"$ref", "#/$defs/d0"}}, {{"minimum", 1}}};
    EXPECT_EQ(refusal_of(fan.dump()).rfind("allOf", 0), 0u) << refusal_of(fan.dump());
    fan["oneOf"] = {{{"$ref", "#/$defs/d0"}}, {{"type", "string"}}};
    fan.erase("allOf");
    for (int level = 0; level < 29; ++level) {
        const std::string next = "#/$defs/d" + std::to_string(level + 1);
        fan["$defs"]["d" + std::to_string(level)] =
            json{{"anyOf", {{{"$ref", next}}, {{"$ref", next}}, {{"$ref", next}}}}};
    }
    EXPECT_EQ(refusal_of(fan.dump()), "oneOf");
    // Many long strings: each costs rules; the total is bounded.
    json wide = {{"type", "object"}, {"properties", json::object()}};
    for (int k = 0; k < 30; ++k) {
        wide["properties"]["p" + std::to_string(k)] = {{"type", "string"}, {"maxLength", 9000}};
    }
    EXPECT_NE(refusal_of(wide.dump()), "no error");
}

// A random JSON value built from schema keywords, each given a value of a
// random JSON type: most are malformed schemas.
json random_schema_like(test::RandomSource& random, int depth) {
    static const char* kKeywords[] = {"type",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "items",
                                      "prefixItems",
                                      "enum",
                                      "const",
                                      "anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref",
                                      "minLength",
                                      "maxLength",
                                      "pattern",
                                      "format",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "minItems",
                                      "maxItems",
                                      "additionalItems",
                                      "$defs",
                                      "title"};
    static const json kLeaves[] = {json(nullptr),
                                   json(true),
                                   json(false),
                                   json(-1),
                                   json(3),
                                   json(2.5),
                                   json("string"),
                                   json("#"),
                                   json("#/$defs/a"),
                                   json("^a+$"),
                                   json("date"),
                                   json(json::array()),
                                   json(json::object()),
                                   json({"a", 1}),
                                   json("integer")};
    if (depth >= 3 || random.integer(0, 3) == 0) {
        return kLeaves[size_t(random.integer(0, int64_t(std::size(kLeaves)) - 1))];
    }
    if (random.integer(0, 4) == 0) {
        json list = json::array();
        for (int64_t k = random.integer(0, 3); k > 0; --k)
            list.push_back(random_schema_like(random, depth + 1));
        return list;
    }
    json object = json::object();
    for (int64_t k = random.integer(0, 4); k > 0; --k) {
        const std::string keyword =
            kKeywords[size_t(random.integer(0, int64_t(std::size(kKeywords)) - 1))];
        object[keyword] = random_schema_like(random, depth + 1);
    }
    return object;
}

TEST(JsonSchemaGrammar, MalformedSchemasAreRefusedNeverCrash) {
    test::RandomSource random;
    int refused = 0;
    for (int round = 0; round < 3000; ++round) {
        const json schema = random_schema_like(random, 0);
        try {
            json_schema_grammar(schema);
        } catch (const SchemaError& e) {
            ++refused;
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        } catch (const std::exception& e) {
            ADD_FAILURE() << schema.dump() << " threw a non-SchemaError: " << e.what() << "; "
                          << random.trace();
        }
    }
    EXPECT_GT(refused, 100);
}

// Samples of a few schemas are sentences the oracle accepts (the sampler
// and the grammar agree), and vary.
TEST(JsonSchemaGrammar, SamplesAreSentences) {
    test::RandomSource random;
    for (
        const char* schema :
        {R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": -3}, "b": {"format": "date"}}})",
         "{}", R"({"type": "array", "items": {"$ref": "#"}, "maxItems": 3})"}) {
        const Grammar g = grammar_of(schema);
        const GrammarSampler sampler(g);
        std::set<std::string> distinct;
        for (int k = 0; k < 30; ++k) {
            const std::string sentence = sampler.sample(random.engine(), 64);
            distinct.insert(sentence);
            EXPECT_TRUE(grammar_accepts(g, sentence))
                << schema << ": " << sentence << "; " << random.trace();
        }
        EXPECT_GT(distinct.size(), 5u) << schema;
    }
}

}  // namespace
}  // namespace servelab
