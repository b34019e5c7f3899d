// json_schema_strings.cpp — JSON strings as grammar rules: characters and
// escapes, minLength / maxLength, pattern, and the names of extra properties.
//
// Lab 12 (chapter 11.6, constrained decoding); support, not the exercise.
// A character of a JSON string is a UTF-8 character other than " \ and the
// controls U+0000..U+001F, or an escape: \" \\ \/ \b \f \n \r \t, \uXXXX
// for a code point outside the surrogates, or a surrogate pair
// \uD8xx\uDCxx (one character, as Python's json reads it). Lone surrogates
// are not allowed: they are not characters, and counting them would make
// minLength disagree with a validator. Lengths count characters, an escape
// being one.
//
// pattern is a regex search (JSON Schema does not anchor it): "^...$" must
// match the whole string, "abc" anywhere in it. JSON Schema reads regexes
// as ECMA-262 does, Python's validators as `re` does (Unicode \d \w \s);
// the grammar keeps to what both accept (portable_regex). The regex grammar
// (regex_grammar.h) matches characters as raw UTF-8, so a patterned string
// is written without escapes: the characters that would need one (" \ and
// controls) are cut from the pattern's grammar.
#include <fmt/format.h>

#include <algorithm>

#include "reference/constrained/json_schema_converter.h"
#include "reference/constrained/regex_grammar.h"
#include "reference/constrained/utf8_ranges.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;

ByteSet byte_range(char low, char high) {
    ByteSet set;
    set.add_range(uint8_t(low), uint8_t(high));
    return set;
}

ByteSet byte_union(const ByteSet& a, const ByteSet& b) {
    ByteSet set = a;
    for (size_t i = 0; i < 4; ++i) set.bits[i] |= b.bits[i];
    return set;
}

ByteSet hex_digit() {
    return byte_union(byte_range('0', '9'), byte_union(byte_range('a', 'f'), byte_range('A', 'F')));
}

// The four hex digits of a \u escape whose first digit is `first` and
// second `second` (case-insensitive letters).
GrammarSymbols unicode_escape(const ByteSet& first, const ByteSet& second) {
    return lit("\\u") + bytes_of(first) + bytes_of(second) + bytes_of(hex_digit()) +
           bytes_of(hex_digit());
}

// The bytes that may stand for themselves inside a JSON string: all but
// controls, " and \ (bytes >= 0x80 only ever occur inside whole UTF-8
// characters, so cutting ASCII bytes cuts whole characters).
ByteSet unescaped_bytes() {
    ByteSet set = ByteSet{}.complement();
    for (int b = 0; b < 0x20; ++b) set.bits[0] &= ~(uint64_t(1) << b);
    for (const char c : {'"', '\\'}) set.bits[uint8_t(c) >> 6] &= ~(uint64_t(1) << (c & 63));
    return set;
}

// The simple escapes: the letter after the backslash, and what it stands for.
constexpr std::pair<char, char> kSimpleEscapes[] = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},
                                                    {'b', '\b'}, {'f', '\f'},  {'n', '\n'},
                                                    {'r', '\r'}, {'t', '\t'}};

// The first code point of UTF-8 `text` and its length in bytes (a stray
// byte counts as one character, its own value).
std::pair<uint32_t, size_t> first_codepoint(std::string_view text) {
    const uint8_t lead = uint8_t(text[0]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    if (lead < 0xC0 || length > text.size()) return {lead, 1};
    uint32_t cp = lead & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (uint8_t(text[i]) & 0x3F);
    return {cp, length};
}

// JSON Schema's pattern searches; regex_grammar matches whole strings.
bool has_top_level_bar(std::string_view pattern) {
    int depth = 0;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\') {
            ++i;
        } else if (c == '[') {
            for (++i; i < pattern.size() && (pattern[i] != ']' || pattern[i - 1] == '['); ++i) {
                if (pattern[i] == '\\') ++i;
            }
        } else if (c == '(' || c == ')') {
            depth += c == '(' ? 1 : -1;
        } else if (c == '|' && depth == 0) {
            return true;
        }
    }
    return false;
}

// The pattern with the constructs whose meaning differs between ECMA-262
// (JSON Schema's regex dialect) and Python's Unicode `re` (what validators
// such as jsonschema run) made safe for both: `.` outside a class becomes
// "any character but a line terminator" (ECMA also stops at \r, U+2028,
// U+2029), \S "no space of either" (Python's and ECMA's spaces listed).
// Throws for \D and \W, and for \d \w \s in a negated class: their
// Unicode sets (660 digits, most of Unicode's letters) are not spelled out,
// and regex_grammar's ASCII reading would allow characters Python rejects.
std::string portable_regex(std::string_view pattern, const std::string& path) {
    constexpr const char* kAnyButLineEnd = "[^\\n\\r\\u2028\\u2029]";
    constexpr const char* kNotSpace =
        "[^\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029"
        "\\u202f\\u205f\\u3000\\ufeff]";
    std::string out;
    bool in_class = false;
    bool negated_class = false;
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char e = pattern[++i];
            const bool unicode_class = e == 'D' || e == 'W' || (e == 'S' && in_class) ||
                                       (negated_class && (e == 'd' || e == 'w' || e == 's'));
            if (unicode_class) {
                throw_schema_error(path, fmt::format("pattern: \\{}{} matches other characters in "
                                                     "Python than in ECMA-262; write the class out",
                                                     e, negated_class ? " in [^...]" : ""));
            }
            out += e == 'S' ? std::string(kNotSpace) : std::string{'\\', e};
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            negated_class = i + 1 < pattern.size() && pattern[i + 1] == '^';
            out += c;
            if (negated_class) out += pattern[++i];
            if (i + 1 < pattern.size() && pattern[i + 1] == ']')
                out += pattern[++i];  // a literal ]
            continue;
        }
        if (in_class && c == ']') in_class = negated_class = false;
        out += (!in_class && c == '.') ? std::string(kAnyButLineEnd) : std::string(1, c);
    }
    return out;
}

std::string whole_string_regex(std::string pattern) {
    const bool anchored_start = !pattern.empty() && pattern.front() == '^';
    size_t backslashes = 0;
    while (backslashes + 1 < pattern.size() && pattern[pattern.size() - 2 - backslashes] == '\\') {
        ++backslashes;
    }
    const bool anchored_end = !pattern.empty() && pattern.back() == '$' && backslashes % 2 == 0;
    // "^a|b$" is (^a)|(b$): leave its anchors inside, where regex_grammar refuses them.
    if ((anchored_start || anchored_end) && has_top_level_bar(pattern)) {
        return ".*(?:" + pattern + ").*";
    }
    if (anchored_end) pattern.pop_back();
    if (anchored_start) pattern.erase(0, 1);
    return (anchored_start ? "" : ".*") + ("(?:" + pattern + ")") + (anchored_end ? "" : ".*");
}

// Copies `grammar`'s rules with every byte set cut down to `allowed`,
// keeping the rules that can still match something; returns the copy of
// its root, or kNoValue.
int32_t import_grammar(JsonSchemaConverter& converter, const Grammar& grammar,
                       const ByteSet& allowed, const std::string& path) {
    const auto symbols_of = [&](int32_t start, const std::vector<bool>& productive,
                                GrammarSymbols* out) {
        for (int32_t i = start; grammar.element(i).kind != GrammarElement::Kind::kEnd; ++i) {
            const GrammarElement& e = grammar.element(i);
            if (e.kind == GrammarElement::Kind::kRule) {
                if (!productive[size_t(e.index)]) return false;
                if (out) out->push_back(GrammarSymbol::of_rule(e.index));
                continue;
            }
            ByteSet cut;
            for (size_t w = 0; w < 4; ++w)
                cut.bits[w] = grammar.byte_set(e.index).bits[w] & allowed.bits[w];
            if (cut.empty()) return false;
            if (out) out->push_back(GrammarSymbol::of_bytes(cut));
        }
        return true;
    };
    std::vector<bool> productive(grammar.num_rules(), false);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < grammar.num_rules(); ++r) {
            for (const int32_t start : grammar.alternatives(int32_t(r))) {
                if (productive[r] || !symbols_of(start, productive, nullptr)) continue;
                productive[r] = changed = true;
            }
        }
    }
    if (!productive[size_t(grammar.root_rule())]) return kNoValue;
    std::vector<int32_t> ids(grammar.num_rules(), kNoValue);
    for (size_t r = 0; r < grammar.num_rules(); ++r) {
        if (productive[r])
            ids[r] = converter.new_rule(path, "pattern-" + grammar.rule_name(int32_t(r)), {});
    }
    for (size_t r = 0; r < grammar.num_rules(); ++r) {
        for (const int32_t start : grammar.alternatives(int32_t(r))) {
            GrammarSymbols symbols;
            if (!productive[r] || !symbols_of(start, productive, &symbols)) continue;
            for (GrammarSymbol& s : symbols) {
                if (s.kind == GrammarSymbol::Kind::kRule) s.rule = ids[size_t(s.rule)];
            }
            converter.builder().add_alternative(ids[r], symbols);
        }
    }
    return ids[size_t(grammar.root_rule())];
}

int32_t pattern_rule(JsonSchemaConverter& converter, const json& pattern, const std::string& path) {
    if (!pattern.is_string()) throw_schema_error(path, "must be a string");
    Grammar grammar;
    try {
        grammar =
            regex_grammar(whole_string_regex(portable_regex(pattern.get<std::string>(), path)));
    } catch (const GrammarError& e) {
        throw_schema_error(path, fmt::format("pattern {}: {}", pattern.dump(), e.what()));
    }
    const int32_t body = import_grammar(converter, grammar, unescaped_bytes(), path);
    if (body == kNoValue) return kNoValue;
    return converter.new_rule(path, "", {lit("\"") + ref(body) + lit("\"")});
}

}  // namespace

std::string json_string_literal(const std::string& text, const std::string& path) {
    try {
        return json(text).dump();
    } catch (const json::exception&) {
        throw_schema_error(path, "a name or value is not valid UTF-8");
    }
}

int32_t JsonSchemaConverter::string_char() {
    if (shared_.count("char")) return shared_["char"];
    const int32_t unescaped = add_codepoint_class_rule(
        builder_, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true, "json-char-unescaped");
    ByteSet simple_escape;
    for (const auto& [letter, stands_for] : kSimpleEscapes) simple_escape.add(uint8_t(letter));
    const ByteSet d = byte_union(ByteSet::single('d'), ByteSet::single('D'));
    const ByteSet not_d =
        byte_union(byte_range('0', '9'),
                   byte_union(byte_range('a', 'c'),
                              byte_union(byte_range('A', 'C'),
                                         byte_union(byte_range('e', 'f'), byte_range('E', 'F')))));
    const ByteSet high_second =
        byte_union(byte_range('8', '9'), byte_union(byte_range('a', 'b'), byte_range('A', 'B')));
    const ByteSet low_second = byte_union(byte_range('c', 'f'), byte_range('C', 'F'));
    return shared_["char"] = named_rule(
               "json-char",
               {ref(unescaped), lit("\\") + bytes_of(simple_escape),
                unicode_escape(not_d, hex_digit()), unicode_escape(d, byte_range('0', '7')),
                unicode_escape(d, high_second) + unicode_escape(d, low_second)});
}

// string ::= '"' rest;  rest ::= '"' | char rest
int32_t JsonSchemaConverter::any_string() {
    if (shared_.count("string")) return shared_["string"];
    const int32_t rest = builder_.fresh_rule("json-string-rest");
    builder_.add_alternative(rest, lit("\""));
    builder_.add_alternative(rest, ref(string_char()) + ref(rest));
    shared_["string-rest"] = rest;
    return shared_["string"] = named_rule("json-string", {lit("\"") + ref(rest)});
}

int32_t JsonSchemaConverter::string_rule(const json& schema, const std::string& path) {
    const std::optional<int64_t> min_length = count_keyword(schema, "minLength", path);
    const std::optional<int64_t> max_length = count_keyword(schema, "maxLength", path);
    for (const char* keyword : {"format", "pattern"}) {
        if (!schema.contains(keyword)) continue;
        for (const char* other : {"minLength", "maxLength", "pattern"}) {
            if (other != std::string(keyword) && schema.contains(other)) {
                throw_schema_error(
                    child_path(path, other),
                    fmt::format("'{}' together with '{}' is not supported", other, keyword));
            }
        }
    }
    if (schema.contains("format")) {
        if (!schema["format"].is_string()) {
            throw_schema_error(child_path(path, "format"), "must be a string");
        }
        return format_rule(schema["format"].get<std::string>(), child_path(path, "format"));
    }
    if (schema.contains("pattern")) {
        return pattern_rule(*this, schema["pattern"], child_path(path, "pattern"));
    }
    if (!min_length && !max_length) return any_string();
    const int64_t min_chars = min_length.value_or(0);
    if (max_length && *max_length < min_chars) return kNoValue;
    // '"' char{min} then up to (max - min) more, or any number more.
    const int32_t chr = string_char();
    any_string();
    int32_t rest = shared_["string-rest"];
    if (max_length) {
        rest = new_rule(path, "chars-0", {lit("\"")});
        for (int64_t k = 1; k <= *max_length - min_chars; ++k) {
            rest = new_rule(path, fmt::format("chars-{}", k), {lit("\""), ref(chr) + ref(rest)});
        }
    }
    GrammarSymbols symbols = lit("\"");
    for (int64_t k = 0; k < min_chars; ++k) symbols.push_back(GrammarSymbol::of_rule(chr));
    return new_rule(path, "string", {symbols + ref(rest)});
}

// The key starts with a character (or a simple escape) that no name starts
// with. Following whole names through a trie would allow more keys, but each
// character of each name would then start a free string, and each such place
// costs the mask cache (compiled_grammar.h) a walk of the vocabulary.
int32_t JsonSchemaConverter::extra_key_rule(const std::vector<std::string>& names,
                                            const std::string& path) {
    any_string();
    const int32_t tail = shared_["string-rest"];  // the rest of any string, closing quote included
    bool empty_name = false;
    ByteSet ascii_first = unescaped_bytes();  // the ASCII characters no name starts with
    for (int b = 0x80; b < 0x100; ++b) ascii_first.bits[b >> 6] &= ~(uint64_t(1) << (b & 63));
    std::vector<CodepointRange> excluded = {{0, 0x7F}};  // the other characters they start with
    for (const std::string& name : names) {
        if (name.empty()) {
            empty_name = true;
            continue;
        }
        const uint32_t cp = first_codepoint(name).first;
        if (cp < 0x80) ascii_first.bits[cp >> 6] &= ~(uint64_t(1) << (cp & 63));
        if (cp >= 0x80) excluded.push_back({cp, cp});
    }
    ByteSet escapes;  // \" \\ \/ \b ... standing for a character no name starts with
    for (const auto& [letter, stands_for] : kSimpleEscapes) {
        const bool starts_a_name =
            std::any_of(names.begin(), names.end(),
                        [&](const std::string& n) { return !n.empty() && n[0] == stands_for; });
        if (!starts_a_name) escapes.add(uint8_t(letter));
    }
    std::vector<GrammarSymbols> alternatives = {
        ref(add_codepoint_class_rule(builder_, excluded, true, rule_name(path, "key-first"))) +
        ref(tail)};
    if (!empty_name) alternatives.push_back(lit("\""));
    if (!ascii_first.empty()) alternatives.push_back(bytes_of(ascii_first) + ref(tail));
    if (!escapes.empty()) alternatives.push_back(lit("\\") + bytes_of(escapes) + ref(tail));
    const int32_t rest = new_rule(path, "key-rest", alternatives);
    return new_rule(path, "key", {lit("\"") + ref(rest)});
}

}  // namespace servelab
