// jinja_builtins.cpp — filters, tests, methods, lookups and operators, as Python does them.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See jinja_builtins.h. Python strings are sequences of code points, so every
// position, length and slice here counts code points of the UTF-8 text.
#include "reference/chat/jinja_builtins.h"

#include <algorithm>
#include <initializer_list>

#include "kernels/common/error.h"

namespace servelab::jinja {
namespace {

constexpr std::string_view kFilters[] = {
    "trim",   "length", "count",      "upper",      "lower", "default", "d",
    "tojson", "string", "join",       "items",      "list",  "first",   "last",
    "select", "reject", "selectattr", "rejectattr", "map",   "replace"};
constexpr std::string_view kTests[] = {"defined",  "undefined", "none",   "boolean", "true",
                                       "false",    "integer",   "number", "string",  "mapping",
                                       "iterable", "sequence",  "even",   "odd",     "divisibleby",
                                       "equalto",  "eq",        "==",     "ne",      "!="};
constexpr std::string_view kMethods[] = {"strip", "lstrip",  "rstrip", "startswith", "endswith",
                                         "split", "replace", "upper",  "lower",      "items",
                                         "keys",  "values",  "get"};

template <typename Range>
bool has(const Range& range, std::string_view name) {
    return std::find(std::begin(range), std::end(range), name) != std::end(range);
}

std::string in_quotes(std::string_view name) {
    return "'" + std::string(name) + "'";
}

// A function's parameters, read like Python binds them: by position or by name.
class Params {
  public:
    Params(std::string_view function, const Arguments& args,
           std::initializer_list<std::string_view> names)
        : function_(function), args_(args), names_(names) {
        if (args.positional.size() > names_.size()) {
            throw Error(function_ + "() takes at most " + std::to_string(names_.size()) +
                        " arguments, " + std::to_string(args.positional.size()) + " given");
        }
        for (const auto& [keyword, value] : args.keywords) {
            const auto it = std::find(names_.begin(), names_.end(), keyword);
            if (it == names_.end()) {
                throw Error(function_ + "() got an unexpected keyword argument " +
                            in_quotes(keyword));
            }
            if (size_t(it - names_.begin()) < args.positional.size()) {
                throw Error(function_ + "() got multiple values for " + in_quotes(keyword));
            }
        }
    }

    // Parameter `index`, or nullptr when the call did not pass it.
    const Value* find(size_t index) const {
        if (index < args_.positional.size()) return &args_.positional[index];
        for (const auto& [keyword, value] : args_.keywords) {
            if (keyword == names_[index]) return &value;
        }
        return nullptr;
    }
    Value get(size_t index, Value fallback = Value()) const {
        const Value* value = find(index);
        return value ? *value : fallback;
    }
    Value required(size_t index) const {
        const Value* value = find(index);
        if (!value)
            throw Error(function_ + "() is missing its argument " + in_quotes(names_[index]));
        return *value;
    }
    std::string string(size_t index, std::string fallback) const {
        const Value value = get(index, Value::string(std::move(fallback)));
        if (!value.is(Value::Kind::kString)) {
            throw Error(function_ + "(): " + in_quotes(names_[index]) + " must be a str, not " +
                        std::string(type_name(value)));
        }
        return value.as_string();
    }
    int64_t integer(size_t index, int64_t fallback) const {
        const Value value = get(index, Value::integer(fallback));
        if (!value.is_integer_like()) {
            throw Error(function_ + "(): " + in_quotes(names_[index]) + " must be an int, not " +
                        std::string(type_name(value)));
        }
        return value.as_int();
    }

  private:
    std::string function_;
    const Arguments& args_;
    std::vector<std::string_view> names_;
};

void expect_no_arguments(std::string_view function, const Arguments& args) {
    Params check(function, args, {});
}

// ---------------------------------------------------------------- str

// The code points of `text`, each as its UTF-8 bytes.
std::vector<std::string_view> characters(std::string_view text) {
    const std::vector<size_t> starts = code_point_starts(text);
    std::vector<std::string_view> chars;
    chars.reserve(starts.size());
    for (size_t i = 0; i < starts.size(); ++i) {
        const size_t end = i + 1 < starts.size() ? starts[i + 1] : text.size();
        chars.push_back(text.substr(starts[i], end - starts[i]));
    }
    return chars;
}

Value text_value(std::string text, Budget& budget) {
    budget.text(text.size());
    return Value::string(std::move(text));
}

// str.strip/lstrip/rstrip: Python whitespace, or any code point of `chars`.
std::string_view strip(std::string_view text, const Value& chars, bool left, bool right) {
    if (chars.is(Value::Kind::kNone) || chars.is_undefined()) return strip_space(text, left, right);
    if (!chars.is(Value::Kind::kString)) throw Error("strip(): the characters must be a str");
    const std::vector<std::string_view> set = characters(chars.as_string());
    const std::vector<std::string_view> chs = characters(text);
    const auto in_set = [&](std::string_view c) { return has(set, c); };
    size_t begin = 0, end = chs.size();
    while (left && begin < end && in_set(chs[begin])) ++begin;
    while (right && end > begin && in_set(chs[end - 1])) --end;
    if (begin == end) return {};
    const size_t from = size_t(chs[begin].data() - text.data());
    return text.substr(from,
                       size_t(chs[end - 1].data() + chs[end - 1].size() - text.data()) - from);
}

// str.upper/lower. Python maps every cased letter of Unicode; servelab knows
// ASCII only, so other text is refused rather than left unchanged.
std::string ascii_case(std::string_view text, bool upper) {
    std::string out(text);
    for (char& c : out) {
        if (uint8_t(c) >= 0x80) throw Error("upper/lower of non-ASCII text is not supported");
        if (upper && c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
        if (!upper && c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    }
    return out;
}

// str.split(sep=None, maxsplit=-1).
List split(std::string_view text, const Value& sep, int64_t maxsplit, Budget& budget) {
    std::vector<std::string_view> parts;
    if (sep.is(Value::Kind::kNone)) {
        // Runs of whitespace separate; whitespace at the ends gives no empty parts.
        const std::vector<std::string_view> chs = characters(text);
        const auto is_space = [](std::string_view c) {
            return strip_space(c, true, false).empty();
        };
        size_t i = 0;
        while (true) {
            while (i < chs.size() && is_space(chs[i])) ++i;
            if (i == chs.size()) break;
            const size_t from = size_t(chs[i].data() - text.data());
            if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
                parts.push_back(text.substr(from));
                break;
            }
            while (i < chs.size() && !is_space(chs[i])) ++i;
            const size_t to = i < chs.size() ? size_t(chs[i].data() - text.data()) : text.size();
            parts.push_back(text.substr(from, to - from));
        }
    } else {
        if (!sep.is(Value::Kind::kString)) throw Error("split(): the separator must be a str");
        const std::string& s = sep.as_string();
        if (s.empty()) throw Error("split(): empty separator");
        size_t from = 0;
        for (size_t at = text.find(s);
             at != std::string_view::npos && (maxsplit < 0 || int64_t(parts.size()) < maxsplit);
             at = text.find(s, from)) {
            parts.push_back(text.substr(from, at - from));
            from = at + s.size();
        }
        parts.push_back(text.substr(from));
    }
    budget.list_items(parts.size());
    budget.text(text.size());
    List out;
    for (const std::string_view part : parts) out.push_back(Value::string(std::string(part)));
    return out;
}

// str.replace(old, new, count=-1); an empty `old` matches before every character and at the end.
std::string replace(std::string_view text, std::string_view old, std::string_view replacement,
                    int64_t count, Budget& budget) {
    std::string out;
    int64_t done = 0;
    const auto allowed = [&] { return count < 0 || done < count; };
    const auto put = [&](std::string_view piece) {
        budget.text(out.size() + piece.size());
        out += piece;
    };
    if (old.empty()) {
        for (const std::string_view c : characters(text)) {
            if (allowed()) put(replacement), ++done;
            put(c);
        }
        if (allowed()) put(replacement);
        return out;
    }
    size_t from = 0;
    for (size_t at = text.find(old); at != std::string_view::npos && allowed();
         at = text.find(old, from)) {
        put(text.substr(from, at - from));
        put(replacement);
        from = at + old.size();
        ++done;
    }
    put(text.substr(from));
    return out;
}

// Python's len().
int64_t length(const Value& value) {
    switch (value.kind()) {
        case Value::Kind::kUndefined:
            return 0;
        case Value::Kind::kString:
            return int64_t(code_point_starts(value.as_string()).size());
        case Value::Kind::kList:
            return int64_t(value.as_list().size());
        case Value::Kind::kDict:
            return int64_t(value.as_dict().size());
        default:
            throw Error("object of type " + in_quotes(type_name(value)) + " has no len()");
    }
}

List item_pairs(const Dict& dict, Budget& budget) {
    budget.list_items(dict.size() * 3);
    List pairs;
    for (const auto& [key, value] : dict) pairs.push_back(Value::list({Value::string(key), value}));
    return pairs;
}

// ---------------------------------------------------------------- filters

// Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value tojson(const Value& input, const Params& params, Budget& budget) {
    if (truthy(params.get(0, Value::boolean(false))))
        throw Error("tojson(ensure_ascii=True) is not supported");
    if (!params.get(2, Value::none()).is(Value::Kind::kNone))
        throw Error("tojson(separators=...) is not supported");
    if (truthy(params.get(3, Value::boolean(false))))
        throw Error("tojson(sort_keys=True) is not supported");
    const Value indent = params.get(1, Value::none());
    if (!indent.is(Value::Kind::kNone) && !indent.is_integer_like()) {
        throw Error("tojson(): indent must be an int or None");
    }
    // json.dumps indents by " " * indent, so a negative indent is 0.
    const int width =
        indent.is(Value::Kind::kNone) ? -1 : int(std::clamp<int64_t>(indent.as_int(), 0, 64));
    // The text is at most a few times the values' own size; check before building it.
    return text_value(to_json(input, width), budget);
}

// item.a.b for the path "a.b", as jinja2's attribute arguments (selectattr,
// map) read it: a part made of digits is an index.
Value attribute_path(Value item, std::string_view path) {
    size_t from = 0;
    while (true) {
        const size_t dot = std::min(path.find('.', from), path.size());
        const std::string part(path.substr(from, dot - from));
        const bool digits =
            !part.empty() && part.size() < 18 &&
            std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        item = get_item(item, digits ? Value::integer(std::stoll(part)) : Value::string(part));
        if (dot == path.size()) return item;
        from = dot + 1;
    }
}

// select/reject/selectattr/rejectattr: keep the items whose test result is `keep`.
Value select_items(const Value& input, const Arguments& args, bool by_attribute, bool keep,
                   Budget& budget) {
    size_t next = 0;
    std::string attribute;
    if (by_attribute) {
        if (args.positional.empty() || !args.positional[0].is(Value::Kind::kString)) {
            throw Error("selectattr/rejectattr need an attribute name");
        }
        attribute = args.positional[next++].as_string();
    }
    std::string test;
    if (next < args.positional.size()) {
        if (!args.positional[next].is(Value::Kind::kString))
            throw Error("select: the test must be named by a str");
        test = args.positional[next++].as_string();
        if (!is_test(test)) throw Error("test " + in_quotes(test) + " is not supported");
    }
    if (!args.keywords.empty()) throw Error("select/reject take no keyword arguments");
    Arguments test_args;
    test_args.positional.assign(args.positional.begin() + long(next), args.positional.end());
    List kept;
    if (!truthy(input)) return Value::generator({});  // jinja2 looks at no items of a false input
    for (const Value& item : iterate(input, budget)) {
        const Value subject = by_attribute ? attribute_path(item, attribute) : item;
        const bool passes = test.empty() ? truthy(subject) : apply_test(test, subject, test_args);
        if (passes == keep) kept.push_back(item);
    }
    return Value::generator(std::move(kept));
}

// map(attribute='name', default=...) or map('filter', args...).
Value map_items(const Value& input, const Arguments& args, Budget& budget) {
    List out;
    if (!truthy(input)) return Value::generator({});  // as jinja2: no items of a false input
    if (args.positional.empty()) {
        const Params params("map", args, {"attribute", "default"});
        const Value attribute = params.required(0);
        if (!attribute.is(Value::Kind::kString)) throw Error("map(): attribute must be a str");
        for (const Value& item : iterate(input, budget)) {
            const Value value = attribute_path(item, attribute.as_string());
            out.push_back(value.is_undefined() ? params.get(1, value) : value);
        }
        return Value::generator(std::move(out));
    }
    if (!args.positional[0].is(Value::Kind::kString) ||
        !is_filter(args.positional[0].as_string())) {
        throw Error("map(): the first argument must name a supported filter");
    }
    Arguments rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keywords = args.keywords;
    for (const Value& item : iterate(input, budget)) {
        out.push_back(apply_filter(args.positional[0].as_string(), item, rest, budget));
    }
    return Value::generator(std::move(out));
}

}  // namespace

bool is_filter(std::string_view name) {
    return has(kFilters, name);
}
bool is_test(std::string_view name) {
    return has(kTests, name);
}
bool is_method(std::string_view name) {
    return has(kMethods, name);
}

Value apply_filter(std::string_view name, const Value& input, const Arguments& args,
                   Budget& budget) {
    if (name == "trim") {
        const Params params("trim", args, {"chars"});
        return text_value(
            std::string(strip(to_text(input), params.get(0, Value::none()), true, true)), budget);
    }
    if (name == "length" || name == "count") {
        expect_no_arguments(name, args);
        return Value::integer(length(input));
    }
    if (name == "upper" || name == "lower") {
        expect_no_arguments(name, args);
        return text_value(ascii_case(to_text(input), name == "upper"), budget);
    }
    if (name == "default" || name == "d") {
        const Params params(name, args, {"default_value", "boolean"});
        const bool use_default = input.is_undefined() || (truthy(params.get(1)) && !truthy(input));
        return use_default ? params.get(0, Value::string("")) : input;
    }
    if (name == "tojson") {
        return tojson(input,
                      Params("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}),
                      budget);
    }
    if (name == "string") {
        expect_no_arguments("string", args);
        return input.is(Value::Kind::kString) ? input : text_value(to_text(input), budget);
    }
    if (name == "join") {
        const Params params("join", args, {"d", "attribute"});
        if (!params.get(1, Value::none()).is(Value::Kind::kNone))
            throw Error("join(attribute=...) is not supported");
        const std::string separator = params.string(0, "");
        std::string out;
        bool first = true;
        for (const Value& item : iterate(input, budget)) {
            const std::string text = to_text(item);
            budget.text(out.size() + separator.size() + text.size());
            out += (first ? "" : separator) + text;
            first = false;
        }
        return Value::string(std::move(out));
    }
    if (name == "items") {
        expect_no_arguments("items", args);
        if (input.is_undefined()) return Value::generator({});
        if (!input.is(Value::Kind::kDict))
            throw Error("items: can only get item pairs from a mapping");
        return Value::generator(item_pairs(input.as_dict(), budget));
    }
    if (name == "list") {
        expect_no_arguments("list", args);
        return Value::list(iterate(input, budget));
    }
    if (name == "first" || name == "last") {
        expect_no_arguments(name, args);
        if (input.is(Value::Kind::kGenerator)) {
            // first reads one item; last would need reversed(), which generators lack.
            if (name == "last") throw Error("'generator' object is not reversible");
            return input.next().value_or(Value::undefined("no first item"));
        }
        const List items = iterate(input, budget);
        if (items.empty()) return Value::undefined("no " + std::string(name) + " item");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "select" || name == "reject")
        return select_items(input, args, false, name == "select", budget);
    if (name == "selectattr" || name == "rejectattr") {
        return select_items(input, args, true, name == "selectattr", budget);
    }
    if (name == "map") return map_items(input, args, budget);
    if (name == "replace") {
        const Params params("replace", args, {"old", "new", "count"});
        return Value::string(replace(to_text(input), params.string(0, ""), params.string(1, ""),
                                     params.integer(2, -1), budget));
    }
    throw Error("filter " + in_quotes(name) + " is not supported");
}

bool apply_test(std::string_view name, const Value& input, const Arguments& args) {
    using K = Value::Kind;
    if (name == "divisibleby" || name == "equalto" || name == "eq" || name == "==" ||
        name == "ne" || name == "!=") {
        const Value other = Params(name, args, {"num"}).required(0);
        if (name == "divisibleby") {
            if (input.is_undefined()) throw Error(input.undefined_reason());
            if (!input.is_integer_like() || !other.is_integer_like())
                throw Error("divisibleby: expected ints");
            if (other.as_int() == 0) throw Error("integer modulo by zero");
            return other.as_int() == -1 || input.as_int() % other.as_int() == 0;
        }
        return equals(input, other) == (name == "equalto" || name == "eq" || name == "==");
    }
    expect_no_arguments(name, args);
    if (name == "defined") return !input.is_undefined();
    if (name == "undefined") return input.is_undefined();
    if (name == "none") return input.is(K::kNone);
    if (name == "boolean") return input.is(K::kBool);
    if (name == "true") return input.is(K::kBool) && input.as_int() == 1;
    if (name == "false") return input.is(K::kBool) && input.as_int() == 0;
    if (name == "integer") return input.is(K::kInt);
    if (name == "number") return input.is_integer_like() || input.is(K::kFloat);
    if (name == "string") return input.is(K::kString);
    if (name == "mapping") return input.is(K::kDict);
    // Undefined iterates as empty, so jinja2 counts it as iterable and a
    // sequence; a generator has no len(), so it is no sequence.
    const bool sequence =
        input.is(K::kString) || input.is(K::kList) || input.is(K::kDict) || input.is_undefined();
    if (name == "sequence") return sequence;
    if (name == "iterable") return sequence || input.is(K::kGenerator);
    if (name == "even" || name == "odd") {
        if (input.is_undefined()) throw Error(input.undefined_reason());
        if (!input.is_integer_like()) throw Error(std::string(name) + ": expected an int");
        return (input.as_int() % 2 == 0) == (name == "even");
    }
    throw Error("test " + in_quotes(name) + " is not supported");
}

Value call_method(const Value& object, std::string_view name, const Arguments& args,
                  Budget& budget) {
    if (object.is_undefined()) throw Error(object.undefined_reason());
    if (object.is(Value::Kind::kString)) {
        const std::string& text = object.as_string();
        if (name == "strip" || name == "lstrip" || name == "rstrip") {
            const Params params(name, args, {"chars"});
            return text_value(std::string(strip(text, params.get(0, Value::none()),
                                                name != "rstrip", name != "lstrip")),
                              budget);
        }
        if (name == "startswith" || name == "endswith") {
            const Params params(name, args, {"prefix"});
            const Value affix = params.required(0);
            if (!affix.is(Value::Kind::kString))
                throw Error(std::string(name) + "(): only a str argument is supported");
            const std::string& a = affix.as_string();
            const bool match =
                a.size() <= text.size() &&
                (name == "startswith" ? text.compare(0, a.size(), a) == 0
                                      : text.compare(text.size() - a.size(), a.size(), a) == 0);
            return Value::boolean(match);
        }
        if (name == "split") {
            const Params params("split", args, {"sep", "maxsplit"});
            return Value::list(
                split(text, params.get(0, Value::none()), params.integer(1, -1), budget));
        }
        if (name == "replace") {
            const Params params("replace", args, {"old", "new", "count"});
            const Value old = params.required(0), replacement = params.required(1);
            if (!old.is(Value::Kind::kString) || !replacement.is(Value::Kind::kString)) {
                throw Error("replace(): arguments must be str");
            }
            return Value::string(replace(text, old.as_string(), replacement.as_string(),
                                         params.integer(2, -1), budget));
        }
        if (name == "upper" || name == "lower") {
            expect_no_arguments(name, args);
            return text_value(ascii_case(text, name == "upper"), budget);
        }
    }
    if (object.is(Value::Kind::kDict)) {
        const Dict& dict = object.as_dict();
        if (name == "items") {
            expect_no_arguments("items", args);
            return Value::list(item_pairs(dict, budget));
        }
        if (name == "keys" || name == "values") {
            expect_no_arguments(name, args);
            budget.list_items(dict.size());
            List out;
            for (const auto& [key, value] : dict)
                out.push_back(name == "keys" ? Value::string(key) : value);
            return Value::list(std::move(out));
        }
        if (name == "get") {
            const Params params("get", args, {"key", "default"});
            const Value key = params.required(0);
            const Value* found =
                key.is(Value::Kind::kString) ? find_key(dict, key.as_string()) : nullptr;
            return found ? *found : params.get(1, Value::none());
        }
    }
    throw Error(in_quotes(type_name(object)) + " object has no method " + in_quotes(name));
}

Value get_attribute(const Value& object, std::string_view name) {
    if (object.is_undefined()) throw Error(object.undefined_reason());
    const Value* found = nullptr;
    if (object.is(Value::Kind::kDict)) found = find_key(object.as_dict(), name);
    if (object.is(Value::Kind::kNamespace)) found = find_key(object.namespace_attributes(), name);
    if (found) return *found;
    return Value::undefined("'" + std::string(type_name(object)) + " object' has no attribute " +
                            in_quotes(name));
}

Value get_item(const Value& object, const Value& key) {
    if (object.is_undefined()) throw Error(object.undefined_reason());
    if (key.is(Value::Kind::kString) &&
        (object.is(Value::Kind::kDict) || object.is(Value::Kind::kNamespace))) {
        return get_attribute(object, key.as_string());
    }
    const bool is_text = object.is(Value::Kind::kString);
    if (key.is_integer_like() && (is_text || object.is(Value::Kind::kList))) {
        std::vector<std::string_view> chars;
        if (is_text) chars = characters(object.as_string());
        const int64_t size = is_text ? int64_t(chars.size()) : int64_t(object.as_list().size());
        const int64_t index = key.as_int() < 0 ? key.as_int() + size : key.as_int();
        if (index >= 0 && index < size) {
            return is_text ? Value::string(std::string(chars[size_t(index)]))
                           : object.as_list()[size_t(index)];
        }
    }
    return Value::undefined(
        "'" + std::string(type_name(object)) + " object' has no element " +
        (key.is(Value::Kind::kString) ? in_quotes(key.as_string()) : to_text(key)));
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step,
                Budget& budget) {
    if (object.is_undefined()) throw Error(object.undefined_reason());
    const bool is_text = object.is(Value::Kind::kString);
    // jinja2 compiles a slice to Python's own obj[a:b], not to its lenient
    // lookup, so slicing anything else is a TypeError, not Undefined.
    if (!is_text && !object.is(Value::Kind::kList)) {
        throw Error(in_quotes(type_name(object)) + " object is not subscriptable");
    }
    for (const Value* bound : {&start, &stop, &step}) {
        if (!bound->is(Value::Kind::kNone) && !bound->is_integer_like()) {
            throw Error("slice indices must be integers or None");
        }
    }
    std::vector<std::string_view> chars;
    if (is_text) chars = characters(object.as_string());
    const int64_t n = is_text ? int64_t(chars.size()) : int64_t(object.as_list().size());
    const int64_t by = step.is(Value::Kind::kNone) ? 1 : step.as_int();
    if (by == 0) throw Error("slice step cannot be zero");
    // Python's slice.indices(): a negative bound counts from the end, then
    // bounds are clamped to the sequence (to -1 .. n-1 when stepping back).
    const auto resolve = [&](const Value& bound, int64_t omitted) {
        if (bound.is(Value::Kind::kNone)) return omitted;
        int64_t i = bound.as_int();
        if (i < 0) i = std::max<int64_t>(i + n, by < 0 ? -1 : 0);
        return std::min<int64_t>(i, by < 0 ? n - 1 : n);
    };
    const int64_t from = resolve(start, by < 0 ? n - 1 : 0);
    const int64_t to = resolve(stop, by < 0 ? -1 : n);
    std::string text;
    List items;
    for (int64_t i = from; by > 0 ? i < to : i > to; i += by) {
        if (is_text) {
            text += chars[size_t(i)];
        } else {
            items.push_back(object.as_list()[size_t(i)]);
        }
    }
    if (is_text) return text_value(std::move(text), budget);
    budget.list_items(items.size());
    return Value::list(std::move(items));
}

List iterate(const Value& value, Budget& budget) {
    List items;
    switch (value.kind()) {
        case Value::Kind::kUndefined:
            return items;
        case Value::Kind::kList:
            items = value.as_list();
            break;
        case Value::Kind::kGenerator:
            items = value.consume();
            break;
        case Value::Kind::kDict:
            for (const auto& [key, item] : value.as_dict()) items.push_back(Value::string(key));
            break;
        case Value::Kind::kString:
            for (const std::string_view c : characters(value.as_string()))
                items.push_back(Value::string(std::string(c)));
            break;
        default:
            throw Error(in_quotes(type_name(value)) + " object is not iterable");
    }
    budget.list_items(items.size());
    return items;
}

Value apply_operator(std::string_view op, const Value& left, const Value& right, Budget& budget) {
    if (op == "~") return text_value(to_text(left) + to_text(right), budget);
    for (const Value* operand : {&left, &right}) {
        if (operand->is_undefined()) throw Error(operand->undefined_reason());
    }
    const auto unsupported = [&]() -> Error {
        return Error("unsupported operand types for " + std::string(op) + ": " +
                     in_quotes(type_name(left)) + " and " + in_quotes(type_name(right)));
    };
    if (left.is_integer_like() && right.is_integer_like()) {
        const int64_t a = left.as_int(), b = right.as_int();
        int64_t result = 0;
        bool overflow = false;
        if (op == "+") overflow = __builtin_add_overflow(a, b, &result);
        if (op == "-") overflow = __builtin_sub_overflow(a, b, &result);
        if (op == "*") overflow = __builtin_mul_overflow(a, b, &result);
        if (op == "%") {
            if (b == 0) throw Error("integer modulo by zero");
            result = b == -1 ? 0 : a % b;
            if (result != 0 && (result < 0) != (b < 0))
                result += b;  // Python's sign: the divisor's
        }
        if (overflow) throw Error("integer overflow in " + std::string(op));
        return Value::integer(result);
    }
    if (op == "+" && left.kind() == right.kind() && left.is(Value::Kind::kString)) {
        return text_value(left.as_string() + right.as_string(), budget);
    }
    if (op == "+" && left.kind() == right.kind() && left.is(Value::Kind::kList)) {
        budget.list_items(left.as_list().size() + right.as_list().size());
        List items = left.as_list();
        items.insert(items.end(), right.as_list().begin(), right.as_list().end());
        return Value::list(std::move(items));
    }
    if (op == "*" && (left.is_integer_like() || right.is_integer_like())) {
        // Repetition: "ab" * 3, 3 * [x]; a count below 1 gives an empty result.
        const Value& sequence = left.is_integer_like() ? right : left;
        const int64_t times =
            std::max<int64_t>(0, (left.is_integer_like() ? left : right).as_int());
        if (sequence.is(Value::Kind::kString)) {
            const std::string& unit = sequence.as_string();
            if (!unit.empty() && times > int64_t(Budget::kMaxStringBytes / unit.size())) {
                throw Error("string repetition is over the size limit");
            }
            budget.text(unit.size() * size_t(times));
            std::string out;
            for (int64_t i = 0; i < times; ++i) out += unit;
            return Value::string(std::move(out));
        }
        if (sequence.is(Value::Kind::kList)) {
            const List& unit = sequence.as_list();
            if (!unit.empty() && times > int64_t(Budget::kBytes / int64_t(unit.size()))) {
                throw Error("list repetition is over the size limit");
            }
            budget.list_items(unit.size() * size_t(times));
            List out;
            for (int64_t i = 0; i < times; ++i) out.insert(out.end(), unit.begin(), unit.end());
            return Value::list(std::move(out));
        }
    }
    if (op == "%" && left.is(Value::Kind::kString))
        throw Error("string formatting with % is not supported");
    if (left.is(Value::Kind::kFloat) || right.is(Value::Kind::kFloat)) {
        throw Error("arithmetic on floats is not supported");
    }
    throw unsupported();
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
        case Value::Kind::kUndefined:
            return false;
        case Value::Kind::kString:
            if (!item.is(Value::Kind::kString)) {
                throw Error("'in <string>' requires a str on the left, not " +
                            in_quotes(type_name(item)));
            }
            return container.as_string().find(item.as_string()) != std::string::npos;
        case Value::Kind::kList:
            return std::any_of(container.as_list().begin(), container.as_list().end(),
                               [&](const Value& x) { return equals(x, item); });
        case Value::Kind::kDict:
            if (item.is(Value::Kind::kList) || item.is(Value::Kind::kDict)) {
                throw Error("unhashable type: " + in_quotes(type_name(item)));
            }
            return item.is(Value::Kind::kString) && find_key(container.as_dict(), item.as_string());
        case Value::Kind::kGenerator:  // reads up to the first match, as Python does
            while (const std::optional<Value> next = container.next()) {
                if (equals(*next, item)) return true;
            }
            return false;
        default:
            throw Error("argument of type " + in_quotes(type_name(container)) + " is not iterable");
    }
}

}  // namespace servelab::jinja
