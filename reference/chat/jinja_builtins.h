// jinja_builtins.h — the filters, tests, methods and lookups a chat template may use.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// Each behaves as its jinja2 (or Python str/dict) namesake does under Hugging
// Face's chat-template settings, including tojson (Hugging Face's own:
// json.dumps with ensure_ascii=False). The parser asks is_filter, is_test and
// is_method at load time, so a template that needs something missing is
// refused before it renders anything. Errors are servelab::Error with a
// message naming the operation; the interpreter adds the position.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reference/chat/jinja_value.h"

namespace servelab::jinja {

// Filters:  trim length count upper lower default d tojson string join items
//           list first last select reject selectattr rejectattr map replace
// Tests:    defined undefined none boolean true false integer number string
//           mapping iterable sequence even odd divisibleby equalto eq ne
// Methods:  str: strip lstrip rstrip startswith endswith split replace upper lower
//           dict: items keys values get
bool is_filter(std::string_view name);
bool is_test(std::string_view name);
bool is_method(std::string_view name);

// Evaluated call arguments: positional ones first, then name=value ones.
struct Arguments {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keywords;
};

Value apply_filter(std::string_view name, const Value& input, const Arguments& args,
                   Budget& budget);
bool apply_test(std::string_view name, const Value& input, const Arguments& args);
Value call_method(const Value& object, std::string_view name, const Arguments& args,
                  Budget& budget);

// object.name: a dict's key or a namespace's attribute; Undefined otherwise.
// Throws when `object` is itself Undefined (jinja2's UndefinedError).
Value get_attribute(const Value& object, std::string_view name);
// object[key]: list and str by (negative) position, dict by key; Undefined
// when absent, as in jinja2. Throws when `object` is Undefined.
Value get_item(const Value& object, const Value& key);
// object[start:stop:step] on a list or str, with Python's rules; an omitted
// bound is None. Throws for other objects.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step,
                Budget& budget);

// The items a {% for %} visits: a list's items, a dict's keys, a str's
// characters; none for Undefined. Throws for anything else.
List iterate(const Value& value, Budget& budget);

// The binary operators + - * % ~ on two values, with Python's rules.
Value apply_operator(std::string_view op, const Value& left, const Value& right, Budget& budget);

// `a in b` (Python's membership test; false when b is Undefined).
bool contains(const Value& container, const Value& item);

}  // namespace servelab::jinja
