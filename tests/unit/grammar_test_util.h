// grammar_test_util.h — grammars built by hand, vocabularies made up, and an
// independent recognizer, for the constrained-decoding tests and benchmark.
//
// Lab 12 tests (chapter 11.6, constrained decoding). Grammars are built
// with GrammarBuilder directly (no parser needed): lit("..."), set("a-z"),
// ref(rule), seq({...}) make symbol lists; star() and optional() add helper
// rules. json_like_grammar() is what a JSON schema for a small object
// compiles to: fixed keys, and string (UTF-8 characters and escapes),
// integer, number, boolean and array values, plus a free JSON value.
// ViablePrefixOracle is a recursive descent recognizer written apart from
// the pushdown matcher, to check it against.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reference/constrained/compiled_grammar.h"
#include "reference/constrained/grammar.h"
#include "reference/constrained/token_vocabulary.h"
#include "reference/constrained/utf8_ranges.h"

namespace servelab::test {

using Symbols = std::vector<GrammarSymbol>;

inline Symbols lit(std::string_view text) {
    return literal_symbols(text);
}
inline Symbols ref(int32_t rule) {
    return {GrammarSymbol::of_rule(rule)};
}
inline Symbols bytes_of(const ByteSet& set) {
    return {GrammarSymbol::of_bytes(set)};
}
// One byte of a class written like "a-zA-Z_" ("-" last or first is literal).
inline Symbols set(std::string_view spec) {
    ByteSet bytes;
    for (size_t i = 0; i < spec.size(); ++i) {
        if (i + 2 < spec.size() && spec[i + 1] == '-') {
            bytes.add_range(uint8_t(spec[i]), uint8_t(spec[i + 2]));
            i += 2;
        } else {
            bytes.add(uint8_t(spec[i]));
        }
    }
    return bytes_of(bytes);
}
inline Symbols seq(std::initializer_list<Symbols> parts) {
    Symbols out;
    for (const Symbols& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}
// A new rule: item*, right-recursive (hint ::= item hint | "").
inline int32_t star(GrammarBuilder& b, const std::string& hint, const Symbols& item) {
    const int32_t rule = b.fresh_rule(hint);
    b.add_alternative(rule, seq({item, ref(rule)}));
    b.add_alternative(rule, {});
    return rule;
}
// A new rule: item? (hint ::= item | "").
inline int32_t optional(GrammarBuilder& b, const std::string& hint, const Symbols& item) {
    const int32_t rule = b.fresh_rule(hint);
    b.add_alternative(rule, item);
    b.add_alternative(rule, {});
    return rule;
}
inline Grammar one_rule_grammar(std::vector<Symbols> alternatives) {
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    for (Symbols& a : alternatives) b.add_alternative(root, std::move(a));
    return b.build("root");
}

// The rules of JSON's values, added to `b`; returns the ids by name.
struct JsonRules {
    int32_t ws, string, integer, number, boolean, value;
};
inline JsonRules add_json_rules(GrammarBuilder& b) {
    JsonRules j{};
    j.ws = star(b, "ws", set(" \t\n"));
    const int32_t hex = b.rule("hex");
    b.add_alternative(hex, set("0-9a-fA-F"));
    const int32_t escape = b.rule("escape");
    b.add_alternative(escape, set("\"\\/bfnrt"));
    b.add_alternative(escape, seq({lit("u"), ref(hex), ref(hex), ref(hex), ref(hex)}));
    // Any character but '"', '\\' and the controls, in UTF-8.
    const int32_t plain = add_codepoint_class_rule(b, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}},
                                                   /*negated=*/true, "plain-char");
    const int32_t character = b.rule("char");
    b.add_alternative(character, ref(plain));
    b.add_alternative(character, seq({lit("\\"), ref(escape)}));
    j.string = b.rule("string");
    b.add_alternative(j.string, seq({lit("\""), ref(star(b, "chars", ref(character))), lit("\"")}));
    const int32_t digits = star(b, "digits", set("0-9"));
    j.integer = b.rule("integer");
    const int32_t minus = optional(b, "minus", lit("-"));
    b.add_alternative(j.integer, seq({ref(minus), lit("0")}));
    b.add_alternative(j.integer, seq({ref(minus), set("1-9"), ref(digits)}));
    const int32_t fraction = optional(b, "fraction", seq({lit("."), set("0-9"), ref(digits)}));
    const int32_t sign = optional(b, "sign", set("+-"));
    const int32_t exponent =
        optional(b, "exponent", seq({set("eE"), ref(sign), set("0-9"), ref(digits)}));
    j.number = b.rule("number");
    b.add_alternative(j.number, seq({ref(j.integer), ref(fraction), ref(exponent)}));
    j.boolean = b.rule("boolean");
    b.add_alternative(j.boolean, lit("true"));
    b.add_alternative(j.boolean, lit("false"));
    j.value = b.rule("value");
    const int32_t array = b.rule("array");
    const int32_t object = b.rule("object");
    for (const int32_t r : {j.string, j.number, j.boolean, array, object}) {
        b.add_alternative(j.value, ref(r));
    }
    b.add_alternative(j.value, lit("null"));
    const Symbols comma = seq({ref(j.ws), lit(","), ref(j.ws)});
    const int32_t more_values = star(b, "more-values", seq({comma, ref(j.value)}));
    b.add_alternative(array, seq({lit("["), ref(j.ws), lit("]")}));
    b.add_alternative(
        array, seq({lit("["), ref(j.ws), ref(j.value), ref(more_values), ref(j.ws), lit("]")}));
    const Symbols member = seq({ref(j.string), ref(j.ws), lit(":"), ref(j.ws), ref(j.value)});
    const int32_t more_members = star(b, "more-members", seq({comma, member}));
    b.add_alternative(object, seq({lit("{"), ref(j.ws), lit("}")}));
    b.add_alternative(object,
                      seq({lit("{"), ref(j.ws), member, ref(more_members), ref(j.ws), lit("}")}));
    return j;
}

// An object with fixed keys, as a JSON schema with required properties
// compiles to: {"name": string, "age": integer, "score": number,
// "active": boolean, "tags": [string, ...], "extra": any value}.
inline Grammar json_like_grammar() {
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const JsonRules j = add_json_rules(b);
    const Symbols comma = seq({ref(j.ws), lit(","), ref(j.ws)});
    const int32_t more_tags = star(b, "more-tags", seq({comma, ref(j.string)}));
    const int32_t tags = b.rule("tags");
    b.add_alternative(tags, seq({lit("["), ref(j.ws), lit("]")}));
    b.add_alternative(
        tags, seq({lit("["), ref(j.ws), ref(j.string), ref(more_tags), ref(j.ws), lit("]")}));
    const auto key = [&](std::string_view name) {
        std::string quoted = "\"";  // (built in steps: GCC 12 warns on "\"" + name + "\"")
        quoted.append(name).push_back('"');
        return seq({lit(quoted), ref(j.ws), lit(":"), ref(j.ws)});
    };
    b.add_alternative(
        root, seq({lit("{"),       ref(j.ws), key("name"),  ref(j.string), comma, key("age"),
                   ref(j.integer), comma,     key("score"), ref(j.number), comma, key("active"),
                   ref(j.boolean), comma,     key("tags"),  ref(tags),     comma, key("extra"),
                   ref(j.value),   ref(j.ws), lit("}")}));
    return b.build("root");
}

// A wider schema's object: `properties` keys "field0", "field1", ...
// whose values cycle through string, integer, boolean, array of numbers,
// and string of at most `max_length` characters (a chain of rules
// short-k ::= "\"" | char short-(k-1), sharing the one char rule, as a
// JSON schema's maxLength compiles to).
inline Grammar wide_object_grammar(int properties, int max_length) {
    GrammarBuilder b;
    const int32_t root = b.rule("root");
    const JsonRules j = add_json_rules(b);
    const Symbols comma = seq({ref(j.ws), lit(","), ref(j.ws)});
    const int32_t numbers = b.rule("numbers");
    const int32_t more_numbers = star(b, "more-numbers", seq({comma, ref(j.number)}));
    b.add_alternative(numbers, seq({lit("["), ref(j.ws), lit("]")}));
    b.add_alternative(
        numbers, seq({lit("["), ref(j.ws), ref(j.number), ref(more_numbers), ref(j.ws), lit("]")}));
    const int32_t character = b.rule("char");
    int32_t rest = b.rule("short-0");
    b.add_alternative(rest, lit("\""));
    for (int k = 1; k <= max_length; ++k) {
        const int32_t longer = b.rule("short-" + std::to_string(k));
        b.add_alternative(longer, lit("\""));
        b.add_alternative(longer, seq({ref(character), ref(rest)}));
        rest = longer;
    }
    const int32_t short_string = b.rule("short-string");
    b.add_alternative(short_string, seq({lit("\""), ref(rest)}));
    const int32_t kinds[] = {j.string, j.integer, j.boolean, numbers, short_string};
    Symbols symbols = seq({lit("{"), ref(j.ws)});
    for (int p = 0; p < properties; ++p) {
        if (p > 0) symbols = seq({symbols, comma});
        symbols = seq({symbols, lit("\"field" + std::to_string(p) + "\""), ref(j.ws), lit(":"),
                       ref(j.ws), ref(kinds[p % 5])});
    }
    b.add_alternative(root, seq({symbols, ref(j.ws), lit("}")}));
    return b.build("root");
}

// `g` compiled for `vocabulary`, with or without the mask cache (without
// it, every mask is the plain trie walk).
inline std::shared_ptr<const CompiledGrammar> compile_grammar(
    const Grammar& g, std::shared_ptr<const TokenVocabulary> vocabulary, bool mask_cache) {
    GrammarCompileOptions options;
    options.mask_cache = mask_cache;
    return CompiledGrammar::compile(g, std::move(vocabulary), options);
}

// A made-up vocabulary of `size` tokens: every single byte, pieces of
// JSON ("\":", "\",", " {\""...), words, numbers, runs of spaces, whole and
// broken UTF-8 characters (lead bytes alone, continuation bytes alone,
// characters cut after 1 or 2 bytes), and random bytes; then two control
// tokens (no bytes) and one end token.
inline TokenVocabulary synthetic_vocabulary(size_t size, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const auto pick = [&](size_t n) { return size_t(rng() % n); };
    const std::vector<std::string> pieces = {
        "{",        "}",    "[",     "]",     ":",        ",",         "\"",   "\\",
        "\":",      "\",",  "\"}",   "\"]",   " \"",      "{\"",       ",\"",  "\": \"",
        "\":\"",    "\\n",  "\\\"",  "\\u00", "true",     "false",     "null", " true",
        ", ",       "\n",   "  ",    "    ",  "\n  ",     "name",      "age",  "score",
        "active",   "tags", "extra", "0",     "1",        "12",        "3.5",  "-",
        "e+",       "1e",   "é",     "ü",     "中",       "😀",         "\xC3", "\xE4\xB8",
        "\xF0\x9F", "\x80", "\xBF",  "\xA9",  "\"name\"", "\"age\": ", "[]",   "{}",
        "[\"",      "\"]}"};
    const std::vector<std::string> words = {"the",   "a",    "of",    "json", "x", "hello",
                                            "world", "data", "value", "id",   "é"};
    TokenVocabulary v;
    std::set<std::string> seen;
    const auto add = [&](std::string bytes) {
        if (!bytes.empty() && seen.insert(bytes).second) v.token_bytes.push_back(bytes);
    };
    for (int b = 0; b < 256; ++b) add(std::string(1, char(b)));
    for (const std::string& p : pieces) add(p);
    while (v.token_bytes.size() + 3 < size) {
        std::string token;
        const int parts = 1 + int(pick(3));
        for (int k = 0; k < parts; ++k) {
            switch (pick(5)) {
                case 0:
                    token += pieces[pick(pieces.size())];
                    break;
                case 1:
                    token += (pick(2) ? " " : "") + words[pick(words.size())];
                    break;
                case 2:
                    token += std::to_string(pick(1000));
                    break;
                case 3:
                    token += utf8_encode(uint32_t(0xA0 + pick(0x3000))).substr(0, 1 + pick(3));
                    break;
                default:
                    token += char(pick(256));
                    break;
            }
        }
        add(token);
    }
    v.token_bytes.push_back("");  // two control tokens
    v.token_bytes.push_back("");
    v.end_tokens.push_back(TokenId(v.token_bytes.size()));
    v.token_bytes.push_back("");  // the end token
    return v;
}

// A random grammar over the bytes of `alphabet`: 2 to 5 rules of 1 to 3
// alternatives of 0 to 4 symbols, each a byte set (one byte, or a few) or a
// reference to a rule (recursion, right or nested, included). Draws again
// while the builder refuses the draw (left recursion).
inline Grammar random_grammar(std::mt19937_64& rng, std::string_view alphabet) {
    const auto pick = [&](size_t n) { return size_t(rng() % n); };
    for (;;) {
        GrammarBuilder b;
        const size_t num_rules = 2 + pick(4);
        for (size_t r = 0; r < num_rules; ++r) b.rule("r" + std::to_string(r));
        for (size_t r = 0; r < num_rules; ++r) {
            const size_t num_alternatives = 1 + pick(3);
            for (size_t a = 0; a < num_alternatives; ++a) {
                Symbols symbols;
                const size_t length = pick(5);
                for (size_t k = 0; k < length; ++k) {
                    if (pick(5) < 2) {
                        symbols.push_back(GrammarSymbol::of_rule(int32_t(pick(num_rules))));
                        continue;
                    }
                    ByteSet bytes;
                    const size_t count = pick(4) == 0 ? 2 + pick(2) : 1;
                    for (size_t c = 0; c < count; ++c)
                        bytes.add(uint8_t(alphabet[pick(alphabet.size())]));
                    symbols.push_back(GrammarSymbol::of_bytes(bytes));
                }
                b.add_alternative(int32_t(r), symbols);
            }
        }
        try {
            return b.build("r0");
        } catch (const GrammarError&) {
        }
    }
}

// Bytes of a random derivation from the root, cut at `max_bytes`: a whole
// sentence, or (when cut, or when a branch ran too deep) a prefix of one.
// Written apart from the matcher: it walks the rules, not stacks.
inline std::string random_derivation(const Grammar& g, std::mt19937_64& rng, size_t max_bytes) {
    std::string out;
    bool cut = false;
    const auto derive = [&](auto&& self, int32_t rule, int depth) -> void {
        const auto alternatives = g.alternatives(rule);
        // Deep down, prefer the shortest alternative so derivations tend to end.
        size_t chosen = size_t(rng() % alternatives.size());
        if (depth > 6) {
            for (size_t a = 0; a < alternatives.size(); ++a) {
                int32_t length_a = 0, length_c = 0;
                while (g.element(alternatives[a] + length_a).kind != GrammarElement::Kind::kEnd)
                    ++length_a;
                while (g.element(alternatives[chosen] + length_c).kind !=
                       GrammarElement::Kind::kEnd)
                    ++length_c;
                if (length_a < length_c) chosen = a;
            }
        }
        for (int32_t e = alternatives[chosen]; !cut; ++e) {
            const GrammarElement& element = g.element(e);
            if (element.kind == GrammarElement::Kind::kEnd) return;
            if (out.size() >= max_bytes || depth > 40) {
                cut = true;
                return;
            }
            if (element.kind == GrammarElement::Kind::kRule) {
                self(self, element.index, depth + 1);
                continue;
            }
            std::vector<uint8_t> choices;
            for (int byte = 0; byte < 256; ++byte) {
                if (g.byte_set(element.index).contains(uint8_t(byte)))
                    choices.push_back(uint8_t(byte));
            }
            out += char(choices[rng() % choices.size()]);
        }
    };
    derive(derive, g.root_rule(), 0);
    return out;
}

// Whether some derivation of the grammar yields bytes that start with the
// input (a viable prefix: what the matcher keeps alive), and whether the
// input is a whole sentence. Recursive descent with memoized sets of end
// positions per (rule, position): fine for short inputs; a grammar without
// left recursion keeps the recursion finite.
class ViablePrefixOracle {
  public:
    ViablePrefixOracle(const Grammar& grammar, std::string input)
        : grammar_(grammar), input_(std::move(input)) {}

    bool viable() { return match_rule(grammar_.root_rule(), 0).runs_out; }
    bool complete() { return match_rule(grammar_.root_rule(), 0).ends.count(input_.size()) > 0; }

  private:
    struct Matches {
        std::set<size_t> ends;  // where a match of the rule from here can end
        bool runs_out = false;  // a match can take all the rest of the input
    };

    const Matches& match_rule(int32_t rule, size_t at) {
        const auto key = std::make_pair(rule, at);
        const auto it = memo_.find(key);
        if (it != memo_.end()) return it->second;
        Matches m;
        for (const int32_t first : grammar_.alternatives(rule)) match_from(first, at, m);
        return memo_[key] = m;
    }

    // Matches the alternative from element `e` on, starting at `at`.
    void match_from(int32_t e, size_t at, Matches& out) {
        if (at == input_.size()) out.runs_out = true;  // what is left may follow the input
        const GrammarElement& element = grammar_.element(e);
        if (element.kind == GrammarElement::Kind::kEnd) {
            out.ends.insert(at);
            return;
        }
        if (element.kind == GrammarElement::Kind::kBytes) {
            if (at < input_.size() &&
                grammar_.byte_set(element.index).contains(uint8_t(input_[at]))) {
                match_from(e + 1, at + 1, out);
            }
            return;
        }
        const Matches inner = match_rule(element.index, at);
        out.runs_out = out.runs_out || inner.runs_out;
        for (const size_t end : inner.ends) match_from(e + 1, end, out);
    }

    const Grammar& grammar_;
    std::string input_;
    std::map<std::pair<int32_t, size_t>, Matches> memo_;
};

}  // namespace servelab::test
