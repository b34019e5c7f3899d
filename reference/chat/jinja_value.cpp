// jinja_value.cpp — Python's rules for the values a chat template computes with.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See jinja_value.h.
#include "reference/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "kernels/common/error.h"
#include "reference/model/unicode_categories.h"

namespace servelab::jinja {
namespace {

int nested_depth(const List& items) {
    int depth = 0;
    for (const Value& item : items) depth = std::max(depth, item.depth());
    if (depth + 1 > Value::kMaxDepth) {
        throw Error("values nest more than " + std::to_string(Value::kMaxDepth) + " deep");
    }
    return depth + 1;
}

[[noreturn]] void wrong_kind(const Value& value, std::string_view wanted) {
    throw Error("expected " + std::string(wanted) + ", got " + std::string(type_name(value)));
}

// str.isspace(): the Unicode White_Space property plus the four ASCII
// "information separators" Python also counts.
bool is_python_space(uint32_t cp) {
    return is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

// The code point of the valid UTF-8 character of `length` bytes at `bytes`.
uint32_t decode(std::string_view bytes, int length) {
    static constexpr uint8_t kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t cp = uint8_t(bytes[0]) & kLeadMask[length];
    for (int i = 1; i < length; ++i) cp = (cp << 6) | (uint8_t(bytes[i]) & 0x3F);
    return cp;
}

// Whether the whole of `bytes` is one valid UTF-8 character that is a space.
bool is_space_char(std::string_view bytes) {
    const int length = utf8_char_length(bytes);
    return length > 0 && size_t(length) == bytes.size() && is_python_space(decode(bytes, length));
}

void append_json_string(std::string& out, std::string_view text) {
    out += '"';
    for (const char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (uint8_t(c) < 0x20) {
                    static constexpr char kHex[] = "0123456789abcdef";
                    out += "\\u00";
                    out += kHex[uint8_t(c) >> 4];
                    out += kHex[uint8_t(c) & 0xF];
                } else {
                    out += c;  // ensure_ascii=False: UTF-8 passes through
                }
        }
    }
    out += '"';
}

void append_json(std::string& out, const Value& value, int indent, int level) {
    // json.dumps with an indent puts each item on its own line, indented one
    // level deeper, and drops the space after ","; without one, all on one line.
    const auto newline = [&](int at_level) {
        if (indent >= 0) out += '\n' + std::string(size_t(indent) * size_t(at_level), ' ');
    };
    const std::string_view separator = indent >= 0 ? "," : ", ";
    switch (value.kind()) {
        case Value::Kind::kNone:
            out += "null";
            return;
        case Value::Kind::kBool:
            out += value.as_int() ? "true" : "false";
            return;
        case Value::Kind::kInt:
            out += std::to_string(value.as_int());
            return;
        case Value::Kind::kFloat:
            out += python_float_repr(value.as_float());
            return;
        case Value::Kind::kString:
            append_json_string(out, value.as_string());
            return;
        case Value::Kind::kList: {
            const List& items = value.as_list();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out += '[';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i > 0) out += separator;
                newline(level + 1);
                append_json(out, items[i], indent, level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        case Value::Kind::kDict: {
            const Dict& items = value.as_dict();
            if (items.empty()) {
                out += "{}";
                return;
            }
            out += '{';
            for (size_t i = 0; i < items.size(); ++i) {
                if (i > 0) out += separator;
                newline(level + 1);
                append_json_string(out, items[i].first);
                out += ": ";
                append_json(out, items[i].second, indent, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        default:
            throw Error("object of type " + std::string(type_name(value)) +
                        " is not JSON serializable");
    }
}

// int, bool or float: the values Python compares as numbers.
bool is_number(const Value& value) {
    return value.is_integer_like() || value.is(Value::Kind::kFloat);
}

double as_double(const Value& value) {
    return value.is(Value::Kind::kFloat) ? value.as_float() : double(value.as_int());
}

}  // namespace

Value Value::undefined(std::string why) {
    Value v;
    v.string_ = std::make_shared<const std::string>(std::move(why));
    return v;
}

Value Value::none() {
    Value v;
    v.kind_ = Kind::kNone;
    return v;
}

Value Value::boolean(bool b) {
    Value v;
    v.kind_ = Kind::kBool;
    v.int_ = b ? 1 : 0;
    return v;
}

Value Value::integer(int64_t i) {
    Value v;
    v.kind_ = Kind::kInt;
    v.int_ = i;
    return v;
}

Value Value::floating(double d) {
    Value v;
    v.kind_ = Kind::kFloat;
    v.float_ = d;
    return v;
}

Value Value::string(std::string s) {
    Value v;
    v.kind_ = Kind::kString;
    v.string_ = std::make_shared<const std::string>(std::move(s));
    return v;
}

Value Value::list(List items) {
    Value v;
    v.kind_ = Kind::kList;
    v.depth_ = nested_depth(items);
    v.list_ = std::make_shared<const List>(std::move(items));
    return v;
}

Value Value::dict(Dict items) {
    List values;
    for (const auto& item : items) values.push_back(item.second);
    Value v;
    v.kind_ = Kind::kDict;
    v.depth_ = nested_depth(values);
    v.dict_ = std::make_shared<const Dict>(std::move(items));
    return v;
}

Value Value::new_namespace(Dict attributes) {
    Value v;
    v.kind_ = Kind::kNamespace;
    v.depth_ = 1;  // nothing recurses into a namespace: it prints and compares as itself
    v.namespace_ = std::make_shared<Dict>(std::move(attributes));
    return v;
}

Value Value::generator(List items) {
    Value v;
    v.kind_ = Kind::kGenerator;
    v.depth_ = nested_depth(items);
    v.generator_ = std::make_shared<Generator>(Generator{std::move(items), 0});
    return v;
}

Value Value::function(std::string name) {
    Value v = string(std::move(name));
    v.kind_ = Kind::kFunction;
    return v;
}

int64_t Value::as_int() const {
    if (!is_integer_like()) wrong_kind(*this, "an int");
    return int_;
}

double Value::as_float() const {
    if (kind_ != Kind::kFloat) wrong_kind(*this, "a float");
    return float_;
}

const std::string& Value::as_string() const {
    if (kind_ != Kind::kString && kind_ != Kind::kFunction) wrong_kind(*this, "a str");
    return *string_;
}

std::string Value::undefined_reason() const {
    return string_ ? *string_ : std::string("the value is undefined");
}

const List& Value::as_list() const {
    if (kind_ != Kind::kList) wrong_kind(*this, "a list");
    return *list_;
}

const Dict& Value::as_dict() const {
    if (kind_ != Kind::kDict) wrong_kind(*this, "a dict");
    return *dict_;
}

Dict& Value::namespace_attributes() const {
    if (kind_ != Kind::kNamespace) wrong_kind(*this, "a namespace");
    return *namespace_;
}

List Value::consume() const {
    if (kind_ != Kind::kGenerator) wrong_kind(*this, "a generator");
    List rest(generator_->items.begin() + long(generator_->next), generator_->items.end());
    generator_->next = generator_->items.size();
    return rest;
}

std::optional<Value> Value::next() const {
    if (kind_ != Kind::kGenerator) wrong_kind(*this, "a generator");
    if (generator_->next == generator_->items.size()) return std::nullopt;
    return generator_->items[generator_->next++];
}

const void* Value::identity() const {
    if (kind_ == Kind::kNamespace) return namespace_.get();
    if (kind_ == Kind::kGenerator) return generator_.get();
    return nullptr;
}

std::string_view type_name(const Value& value) {
    switch (value.kind()) {
        case Value::Kind::kUndefined:
            return "Undefined";
        case Value::Kind::kNone:
            return "NoneType";
        case Value::Kind::kBool:
            return "bool";
        case Value::Kind::kInt:
            return "int";
        case Value::Kind::kFloat:
            return "float";
        case Value::Kind::kString:
            return "str";
        case Value::Kind::kList:
            return "list";
        case Value::Kind::kDict:
            return "dict";
        case Value::Kind::kNamespace:
            return "Namespace";
        case Value::Kind::kGenerator:
            return "generator";
        case Value::Kind::kFunction:
            return "function";
    }
    return "?";
}

bool truthy(const Value& value) {
    switch (value.kind()) {
        case Value::Kind::kUndefined:
        case Value::Kind::kNone:
            return false;
        case Value::Kind::kBool:
        case Value::Kind::kInt:
            return value.as_int() != 0;
        case Value::Kind::kFloat:
            return value.as_float() != 0.0;
        case Value::Kind::kString:
            return !value.as_string().empty();
        case Value::Kind::kList:
            return !value.as_list().empty();
        case Value::Kind::kDict:
            return !value.as_dict().empty();
        default:
            return true;
    }
}

std::string to_text(const Value& value) {
    switch (value.kind()) {
        case Value::Kind::kUndefined:
            return "";
        case Value::Kind::kNone:
            return "None";
        case Value::Kind::kBool:
            return value.as_int() ? "True" : "False";
        case Value::Kind::kInt:
            return std::to_string(value.as_int());
        case Value::Kind::kFloat:
            return python_float_repr(value.as_float());
        case Value::Kind::kString:
            return value.as_string();
        default:
            throw Error("printing a " + std::string(type_name(value)) +
                        " is not supported (it would need Python's repr)");
    }
}

bool equals(const Value& a, const Value& b) {
    if (a.is_integer_like() && b.is_integer_like()) return a.as_int() == b.as_int();
    if (is_number(a) && is_number(b)) return as_double(a) == as_double(b);
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case Value::Kind::kString:
        case Value::Kind::kFunction:
            return a.as_string() == b.as_string();
        case Value::Kind::kList:
            return std::equal(a.as_list().begin(), a.as_list().end(), b.as_list().begin(),
                              b.as_list().end(), equals);
        case Value::Kind::kDict: {
            if (a.as_dict().size() != b.as_dict().size()) return false;
            for (const auto& [key, item] : a.as_dict()) {
                const Value* other = find_key(b.as_dict(), key);
                if (other == nullptr || !equals(item, *other)) return false;
            }
            return true;
        }
        case Value::Kind::kNamespace:
        case Value::Kind::kGenerator:
            return a.identity() == b.identity();
        default:
            return true;  // Undefined == Undefined, None == None
    }
}

int compare(const Value& a, const Value& b) {
    if (a.is_integer_like() && b.is_integer_like()) {
        return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    if (is_number(a) && is_number(b)) {
        return as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
    }
    // UTF-8 byte order is code point order, which is how Python orders str.
    if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) {
        return a.as_string().compare(b.as_string());
    }
    if (a.is(Value::Kind::kList) && b.is(Value::Kind::kList)) {
        // Python compares the first items that differ, else the lengths.
        const List& x = a.as_list();
        const List& y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (!equals(x[i], y[i])) return compare(x[i], y[i]);
        }
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    throw Error("cannot order " + std::string(type_name(a)) + " and " + std::string(type_name(b)));
}

std::string python_float_repr(double value) {
    // std::to_chars without a precision gives the shortest digits that read
    // back exactly, as Python's repr does; only the layout differs.
    char buffer[64];
    const auto result =
        std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
    const std::string scientific(buffer, result.ptr);  // "-1.25e+02"
    const bool negative = scientific[0] == '-';
    const size_t e = scientific.find('e');
    std::string digits;  // "125": the significant digits, no point
    for (size_t i = negative ? 1 : 0; i < e; ++i) {
        if (scientific[i] != '.') digits += scientific[i];
    }
    const int exponent = std::atoi(scientific.c_str() + e + 1);  // of the first digit
    std::string out = negative ? "-" : "";
    if (exponent < -4 || exponent >= 16) {  // "1.5e+16", "1e-05"
        out.append(digits, 0, 1);
        if (digits.size() > 1) out.append(".").append(digits, 1);
        const std::string magnitude = std::to_string(std::abs(exponent));
        out.append(exponent < 0 ? "e-" : "e+");
        if (magnitude.size() < 2) out.append("0");
        out.append(magnitude);
    } else if (exponent < 0) {  // "0.0001"
        out.append("0.").append(size_t(-exponent - 1), '0').append(digits);
    } else if (digits.size() <= size_t(exponent) + 1) {  // "100.0"
        out.append(digits).append(size_t(exponent) + 1 - digits.size(), '0').append(".0");
    } else {  // "12.5"
        out.append(digits, 0, size_t(exponent) + 1)
            .append(".")
            .append(digits, size_t(exponent) + 1);
    }
    return out;
}

const Value* find_key(const Dict& dict, std::string_view key) {
    for (const auto& [name, value] : dict) {
        if (name == key) return &value;
    }
    return nullptr;
}

std::string to_json(const Value& value, int indent) {
    std::string out;
    append_json(out, value, indent, 0);
    return out;
}

std::vector<size_t> code_point_starts(std::string_view text) {
    std::vector<size_t> starts;
    for (size_t pos = 0; pos < text.size();) {
        starts.push_back(pos);
        const int length = utf8_char_length(text.substr(pos));
        pos += length > 0 ? size_t(length) : 1;
    }
    return starts;
}

std::string_view strip_space(std::string_view text, bool left, bool right) {
    while (left && !text.empty()) {
        const int length = utf8_char_length(text);
        if (length <= 0 || !is_space_char(text.substr(0, size_t(length)))) break;
        text.remove_prefix(size_t(length));
    }
    while (right && !text.empty()) {
        // The last character starts at the last byte that is not 10xxxxxx.
        size_t start = text.size() - 1;
        while (start > 0 && text.size() - start < 4 && (uint8_t(text[start]) & 0xC0) == 0x80) {
            --start;
        }
        if (!is_space_char(text.substr(start))) break;
        text.remove_suffix(text.size() - start);
    }
    return text;
}

void Budget::step() {
    if (--steps_left_ < 0) {
        throw Error("rendering took more than " + std::to_string(kSteps) + " steps");
    }
}

void Budget::text(size_t bytes) {
    if (bytes > kMaxStringBytes) {
        throw Error("a string of " + std::to_string(bytes) + " bytes is over the limit of " +
                    std::to_string(kMaxStringBytes));
    }
    bytes_left_ -= int64_t(bytes);
    if (bytes_left_ < 0)
        throw Error("rendering built more than " + std::to_string(kBytes) + " bytes");
}

void Budget::list_items(size_t count) {
    if (count > size_t(kBytes / int64_t(sizeof(Value)))) {
        throw Error("a list of " + std::to_string(count) + " items is over the limit");
    }
    bytes_left_ -= int64_t(count * sizeof(Value));
    if (bytes_left_ < 0)
        throw Error("rendering built more than " + std::to_string(kBytes) + " bytes");
}

}  // namespace servelab::jinja
