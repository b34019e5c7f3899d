// jinja_value.h — the values a chat template computes with, and what they cost.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// A Jinja template computes with Python values: str, int, bool, None, list
// and dict, plus Jinja's own Undefined (what a missing variable, key or index
// gives: it prints as nothing and is false), namespace objects (which a
// template may change in place) and generators (what select, map, items and
// the like return: one pass over their items, then empty). Floats come only
// from JSON a request hands the template (a tool's schema, chat_template_kwargs):
// they print, compare and serialize as Python's do, but a template cannot
// compute with them (no float literals, no float arithmetic). Every rule here
// is Python's, checked against jinja2 by tests/unit/chat_template_test.cpp.
// Where servelab cannot match Python byte for byte (printing a list needs
// Python's repr) it throws servelab::Error rather than print something else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace servelab::jinja {

class Value;
using List = std::vector<Value>;
// A Python dict: string keys in insertion order (templates build tiny dicts,
// so lookup is a linear scan).
using Dict = std::vector<std::pair<std::string, Value>>;

class Value {
  public:
    enum class Kind {
        kUndefined,
        kNone,
        kBool,
        kInt,
        kFloat,
        kString,
        kList,
        kDict,
        kNamespace,
        kGenerator,
        kFunction
    };

    Value() = default;  // Undefined
    // Undefined that remembers why ("'x' is undefined"), for the error that
    // doing arithmetic or a lookup on it raises, as jinja2's Undefined does.
    static Value undefined(std::string why);
    static Value none();
    static Value boolean(bool b);
    static Value integer(int64_t i);
    static Value floating(double d);  // finite only (JSON has no NaN or infinity)
    static Value string(std::string s);
    // Throws servelab::Error when the result would nest deeper than kMaxDepth.
    static Value list(List items);
    static Value dict(Dict items);
    // A namespace(...) object: copies of the Value share its attributes.
    static Value new_namespace(Dict attributes);
    // A Python generator over `items`: copies share how far it has been read.
    static Value generator(List items);
    // A global function (raise_exception, namespace), called by name.
    static Value function(std::string name);

    Kind kind() const { return kind_; }
    bool is(Kind kind) const { return kind_ == kind; }
    bool is_undefined() const { return kind_ == Kind::kUndefined; }
    // Python's bool is a subclass of int: True + 1 == 2, True == 1.
    bool is_integer_like() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }

    // The payload; each throws servelab::Error when the kind differs.
    int64_t as_int() const;                // kInt or kBool
    double as_float() const;               // kFloat
    const std::string& as_string() const;  // kString, or kFunction's name
    std::string undefined_reason() const;
    const List& as_list() const;
    const Dict& as_dict() const;
    Dict& namespace_attributes() const;
    // The generator's items not yet read, which from now on count as read
    // (a second pass finds nothing, as in Python).
    List consume() const;
    // The generator's next item, which now counts as read; nullopt at the end.
    std::optional<Value> next() const;
    // The object a namespace or generator is, for Python's identity comparison.
    const void* identity() const;

    // Containers nested inside this value (0 for scalars). Capped so that
    // printing, comparing or freeing a value cannot recurse without bound.
    int depth() const { return depth_; }
    static constexpr int kMaxDepth = 64;

  private:
    Kind kind_ = Kind::kUndefined;
    int64_t int_ = 0;
    double float_ = 0.0;
    int depth_ = 0;
    // Shared and immutable, so copying a Value (every variable read) is cheap.
    std::shared_ptr<const std::string> string_;  // also kFunction's name, kUndefined's reason
    std::shared_ptr<const List> list_;
    std::shared_ptr<const Dict> dict_;
    std::shared_ptr<Dict> namespace_;  // mutable
    struct Generator {
        List items;
        size_t next = 0;  // items before this one have been read
    };
    std::shared_ptr<Generator> generator_;  // mutable
};

// Python's name for the value's type, for error messages ("str", "list").
std::string_view type_name(const Value& value);

// Python's bool(value); Undefined is false.
bool truthy(const Value& value);

// Python's str(value): what {{ value }} prints and what `~` joins. Undefined
// is "", None "None", True "True", a float its repr ("0.5", "1e-05"). Throws for lists, dicts,
// namespaces and functions (their repr is not reproduced).
std::string to_text(const Value& value);

// Python's repr of a float: the shortest digits that read back as `value`,
// positional for exponents -4 to 15 ("100.0", "0.0001"), else scientific
// ("1e-05", "1.5e+16"). json.dumps writes floats the same way.
std::string python_float_repr(double value);

// Python's ==, with Jinja's rule that two Undefineds are equal.
bool equals(const Value& a, const Value& b);

// Python's <: negative, zero or positive. Throws for types Python cannot order.
int compare(const Value& a, const Value& b);

// The value of `key` in `dict`, or nullptr.
const Value* find_key(const Dict& dict, std::string_view key);

// Hugging Face's tojson filter: json.dumps(value, ensure_ascii=False,
// indent=indent); indent < 0 means none (", " and ": " separators).
std::string to_json(const Value& value, int indent);

// Python's str is a sequence of code points; servelab keeps the UTF-8 bytes.
// The byte offset at which each code point of `text` starts; a byte that is
// not part of valid UTF-8 counts as one code point of its own.
std::vector<size_t> code_point_starts(std::string_view text);

// `text` without the characters Python's str.isspace() accepts (Unicode
// White_Space and U+001C..U+001F) at its start and/or end: str.strip().
std::string_view strip_space(std::string_view text, bool left, bool right);

// What one render may still spend, so that no template runs for long or fills
// memory: every expression and statement evaluated costs a step, every byte
// of text and every list slot built costs its size. Each method throws
// servelab::Error once the budget is spent.
class Budget {
  public:
    static constexpr int64_t kSteps = 10'000'000;  // about half a second of evaluation
    static constexpr int64_t kBytes = int64_t{256} << 20;
    static constexpr size_t kMaxStringBytes = size_t{32} << 20;  // one string, and the output

    void step();
    void text(size_t bytes);  // also throws for a string over kMaxStringBytes
    void list_items(size_t count);

  private:
    int64_t steps_left_ = kSteps;
    int64_t bytes_left_ = kBytes;
};

}  // namespace servelab::jinja
