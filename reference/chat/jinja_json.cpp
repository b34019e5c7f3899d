// jinja_json.cpp — see jinja_json.h.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
#include "reference/chat/jinja_json.h"

#include <cstdint>
#include <string>

#include "kernels/common/error.h"

namespace servelab::jinja {
namespace {

// `depth` counts the containers around `json`; the check comes before the
// recursion, so hostile nesting costs no stack.
Value convert(const nlohmann::ordered_json& json, int depth) {
    if (depth > Value::kMaxDepth) {
        throw Error("JSON nests more than " + std::to_string(Value::kMaxDepth) +
                    " deep for a chat template");
    }
    switch (json.type()) {
        case nlohmann::ordered_json::value_t::null:
            return Value::none();
        case nlohmann::ordered_json::value_t::boolean:
            return Value::boolean(json.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer:
            return Value::integer(json.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned:
            if (json.get<uint64_t>() > uint64_t(INT64_MAX)) {
                throw Error("the integer " + json.dump() + " does not fit in 64 bits");
            }
            return Value::integer(int64_t(json.get<uint64_t>()));
        case nlohmann::ordered_json::value_t::number_float:
            return Value::floating(json.get<double>());
        case nlohmann::ordered_json::value_t::string:
            return Value::string(json.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            List items;
            for (const auto& item : json) items.push_back(convert(item, depth + 1));
            return Value::list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            Dict items;
            for (const auto& [key, item] : json.items()) {
                items.emplace_back(key, convert(item, depth + 1));
            }
            return Value::dict(std::move(items));
        }
        default:  // binary, discarded: never from a parsed request
            throw Error("a JSON value of this type cannot reach a chat template");
    }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& json) {
    return convert(json, 0);
}

}  // namespace servelab::jinja
