// json_schema_any.cpp — any JSON value (the schema `true`, or `{}`), and the
// whitespace allowed between tokens.
//
// Lab 12 (chapter 11.6, constrained decoding); support, not the exercise.
// JSON allows any run of spaces, tabs and newlines between tokens. A small
// model that starts emitting newlines may never stop, and every one of them
// would be "valid"; so the grammar allows none, one space, or one newline
// with up to kMaxIndentBytes spaces or tabs of indentation — enough for
// json.dumps(indent=2) ten levels deep, and never a blank line.
// Whitespace comes after a token ({ [ , : and each value), never before the
// first one or after the last: the output is the JSON text and nothing else.
#include <string>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {

int32_t JsonSchemaConverter::whitespace() {
    if (shared_.count("ws")) return shared_["ws"];
    if (options_.compact_whitespace) return shared_["ws"] = named_rule("ws", {{}, lit(" ")});
    int32_t indent = named_rule("ws-indent-0", {{}});
    for (int bytes = 1; bytes <= kMaxIndentBytes; ++bytes) {
        ByteSet space_or_tab;
        space_or_tab.add(' ');
        space_or_tab.add('\t');
        indent = named_rule("ws-indent-" + std::to_string(bytes),
                            {{}, bytes_of(space_or_tab) + ref(indent)});
    }
    return shared_["ws"] = named_rule("ws", {{}, lit(" "), lit("\n") + ref(indent)});
}

// value ::= object | array | string | number | "true" | "false" | "null"
int32_t JsonSchemaConverter::any_value() {
    if (shared_.count("value")) return shared_["value"];
    const int32_t value = shared_["value"] = builder_.fresh_rule("json-value");
    check_rule_count("");
    for (const int32_t kind : {any_object(), any_array(), any_string(), any_number()}) {
        builder_.add_alternative(value, ref(kind));
    }
    for (const char* word : {"true", "false", "null"}) builder_.add_alternative(value, lit(word));
    return value;
}

// object ::= "{" ws "}" | "{" ws member rest
// member ::= string ws ":" ws value ws
// rest   ::= "}" | "," ws member rest
int32_t JsonSchemaConverter::any_object() {
    if (shared_.count("object")) return shared_["object"];
    const int32_t ws = whitespace();
    const int32_t member = named_rule("json-member", {ref(any_string()) + ref(ws) + lit(":") +
                                                      ref(ws) + ref(any_value()) + ref(ws)});
    const int32_t rest = builder_.fresh_rule("json-members");
    builder_.add_alternative(rest, lit("}"));
    builder_.add_alternative(rest, lit(",") + ref(ws) + ref(member) + ref(rest));
    return shared_["object"] = named_rule(
               "json-object",
               {lit("{") + ref(ws) + lit("}"), lit("{") + ref(ws) + ref(member) + ref(rest)});
}

// array ::= "[" ws "]" | "[" ws value ws rest
// rest  ::= "]" | "," ws value ws rest
int32_t JsonSchemaConverter::any_array() {
    if (shared_.count("array")) return shared_["array"];
    const int32_t ws = whitespace();
    const int32_t value = any_value();
    const int32_t rest = builder_.fresh_rule("json-elements");
    builder_.add_alternative(rest, lit("]"));
    builder_.add_alternative(rest, lit(",") + ref(ws) + ref(value) + ref(ws) + ref(rest));
    return shared_["array"] =
               named_rule("json-array", {lit("[") + ref(ws) + lit("]"),
                                         lit("[") + ref(ws) + ref(value) + ref(ws) + ref(rest)});
}

}  // namespace servelab
