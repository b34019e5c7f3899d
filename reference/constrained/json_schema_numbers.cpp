// json_schema_numbers.cpp — JSON numbers, and integers between bounds, as
// grammar rules.
//
// Lab 12 (chapter 11.6, constrained decoding); support, not the exercise.
// A number is JSON's: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. An
// integer is written without fraction or exponent (1.0 and 1e0 validate as
// integers too, but a model need not write them so).
//
// Integer bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum, and
// draft 4's boolean exclusiveMinimum/Maximum) become exact digit rules: the
// decimal strings of [low, high] are, length by length, a few runs of digit
// ranges — [17, 423] is 1[7-9] | [2-9][0-9] | [1-3][0-9][0-9] | 4[0-1][0-9] |
// 42[0-3] — the same splitting utf8_ranges.cpp does for code points. Bounds
// may be anything a 64-bit integer (signed or not) holds, or a fraction
// (rounded inward). A bound on a number that may have a fraction is refused:
// deciding 0.1 < x by digits is possible, but not exactly as a validator's
// binary floating point decides it.
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {
namespace {

using json = nlohmann::ordered_json;
using Int128 = __int128;

const char* const kBoundKeywords[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

std::string decimal(Int128 value) {
    if (value == 0) return "0";
    std::string text;
    for (Int128 v = value < 0 ? -value : value; v > 0; v /= 10)
        text.insert(text.begin(), char('0' + int(v % 10)));
    return value < 0 ? "-" + text : text;
}

// A bound as an integer: rounded up for a lower bound, down for an upper
// one; SchemaError beyond 64 bits.
Int128 integer_bound(const json& bound, bool lower, const std::string& path) {
    if (!bound.is_number()) throw_schema_error(path, "must be a number");
    if (bound.is_number_unsigned()) return Int128(bound.get<uint64_t>());
    if (bound.is_number_integer()) return Int128(bound.get<int64_t>());
    const double x = bound.get<double>();
    constexpr double kTwoTo64 = 18446744073709551616.0;
    if (!(std::fabs(x) < kTwoTo64)) {
        throw_schema_error(path, fmt::format("the bound {} is beyond 64 bits", bound.dump()));
    }
    return Int128(lower ? std::ceil(x) : std::floor(x));
}

struct IntegerBounds {
    std::optional<Int128> low;   // inclusive
    std::optional<Int128> high;  // inclusive
};

IntegerBounds integer_bounds(const json& schema, const std::string& path) {
    IntegerBounds b;
    const auto lower = [&](Int128 v) { b.low = b.low ? std::max(*b.low, v) : v; };
    const auto upper = [&](Int128 v) { b.high = b.high ? std::min(*b.high, v) : v; };
    for (const char* keyword : kBoundKeywords) {
        if (!schema.contains(keyword)) continue;
        const json& value = schema[keyword];
        const std::string where = child_path(path, keyword);
        const bool is_lower =
            keyword == std::string("minimum") || keyword == std::string("exclusiveMinimum");
        const bool exclusive = std::string(keyword).starts_with("exclusive");
        if (exclusive && value.is_boolean()) continue;  // draft 4: read with minimum/maximum
        const bool draft4_exclusive =
            !exclusive &&
            schema.value(is_lower ? "exclusiveMinimum" : "exclusiveMaximum", json()) == json(true);
        // x > 2.5 is x >= 3, and x > 2 is x >= 3: floor + 1 (ceil - 1 for x < bound).
        if (exclusive || draft4_exclusive) {
            const Int128 v = integer_bound(value, !is_lower, where);
            is_lower ? lower(v + 1) : upper(v - 1);
        } else {
            const Int128 v = integer_bound(value, is_lower, where);
            is_lower ? lower(v) : upper(v);
        }
    }
    return b;
}

// The runs of digit ranges spelling [x, y], two decimal strings of the same
// length, after `prefix` (see the header comment).
void same_length_runs(const std::string& x, const std::string& y, const GrammarSymbols& prefix,
                      std::vector<GrammarSymbols>& out) {
    const auto digit = [](char low, char high) {
        ByteSet set;
        set.add_range(uint8_t(low), uint8_t(high));
        return bytes_of(set);
    };
    if (x.empty()) {
        out.push_back(prefix);
        return;
    }
    const size_t rest = x.size() - 1;
    if (x[0] == y[0]) {
        same_length_runs(x.substr(1), y.substr(1), prefix + digit(x[0], x[0]), out);
        return;
    }
    char first_full = x[0];
    char last_full = y[0];
    if (x.substr(1) != std::string(rest, '0')) {
        same_length_runs(x.substr(1), std::string(rest, '9'), prefix + digit(x[0], x[0]), out);
        ++first_full;
    }
    const bool y_partial = y.substr(1) != std::string(rest, '9');
    if (y_partial) --last_full;
    if (first_full <= last_full) {
        GrammarSymbols run = prefix + digit(first_full, last_full);
        for (size_t k = 0; k < rest; ++k) run = run + digit('0', '9');
        out.push_back(run);
    }
    if (y_partial) {
        same_length_runs(std::string(rest, '0'), y.substr(1), prefix + digit(y[0], y[0]), out);
    }
}

// The decimal strings of [low, high], low >= 1 (no high: unbounded), as
// alternatives; `digits` matches [0-9]*.
std::vector<GrammarSymbols> positive_runs(Int128 low, std::optional<Int128> high, int32_t digits) {
    std::vector<GrammarSymbols> out;
    const std::string a = decimal(low);
    const std::string b = high ? decimal(*high) : std::string(a.size(), '9');
    for (size_t length = a.size(); length <= b.size(); ++length) {
        std::string lowest(length, '0');  // 10...0
        lowest[0] = '1';
        same_length_runs(length == a.size() ? a : lowest,
                         length == b.size() ? b : std::string(length, '9'), {}, out);
    }
    if (!high) {  // every longer number: [1-9][0-9]{len(a)}[0-9]*
        ByteSet nonzero;
        nonzero.add_range('1', '9');
        GrammarSymbols longer = bytes_of(nonzero);
        ByteSet any_digit;
        any_digit.add_range('0', '9');
        for (size_t k = 0; k < a.size(); ++k) longer = longer + bytes_of(any_digit);
        out.push_back(longer + ref(digits));
    }
    return out;
}

}  // namespace

int32_t JsonSchemaConverter::any_number() {
    if (shared_.count("number")) return shared_["number"];
    ByteSet digit;
    digit.add_range('0', '9');
    ByteSet nonzero;
    nonzero.add_range('1', '9');
    const int32_t digits = builder_.fresh_rule("json-digits");  // [0-9]*
    builder_.add_alternative(digits, {});
    builder_.add_alternative(digits, bytes_of(digit) + ref(digits));
    shared_["digits"] = digits;
    const int32_t integer =
        named_rule("json-integer", {lit("0"), lit("-0"), bytes_of(nonzero) + ref(digits),
                                    lit("-") + bytes_of(nonzero) + ref(digits)});
    shared_["integer"] = integer;
    const int32_t fraction =
        named_rule("json-fraction", {{}, lit(".") + bytes_of(digit) + ref(digits)});
    ByteSet e;
    e.add('e');
    e.add('E');
    const int32_t exponent_sign = named_rule("json-exponent-sign", {{}, lit("+"), lit("-")});
    const int32_t exponent = named_rule(
        "json-exponent", {{}, bytes_of(e) + ref(exponent_sign) + bytes_of(digit) + ref(digits)});
    return shared_["number"] =
               named_rule("json-number", {ref(integer) + ref(fraction) + ref(exponent)});
}

int32_t JsonSchemaConverter::number_rule(const json& schema, const std::string& path) {
    for (const char* keyword : kBoundKeywords) {
        if (schema.contains(keyword)) {
            throw_schema_error(child_path(path, keyword),
                               fmt::format("'{}' on a number that may have a fraction cannot be "
                                           "enforced exactly (it can on \"type\": \"integer\")",
                                           keyword));
        }
    }
    return any_number();
}

int32_t JsonSchemaConverter::integer_rule(const json& schema, const std::string& path) {
    any_number();
    const IntegerBounds bounds = integer_bounds(schema, path);
    if (!bounds.low && !bounds.high) return shared_["integer"];
    if (bounds.low && bounds.high && *bounds.low > *bounds.high) return kNoValue;
    const int32_t digits = shared_["digits"];
    std::vector<GrammarSymbols> alternatives;
    // Negative: "-" and a magnitude in [max(-high, 1), -low].
    const Int128 top_negative = bounds.high ? std::min<Int128>(*bounds.high, -1) : -1;
    if (!bounds.low || *bounds.low <= top_negative) {
        std::optional<Int128> most;
        if (bounds.low) most = -*bounds.low;
        for (const GrammarSymbols& run : positive_runs(-top_negative, most, digits)) {
            alternatives.push_back(lit("-") + run);
        }
    }
    if ((!bounds.low || *bounds.low <= 0) && (!bounds.high || *bounds.high >= 0)) {
        alternatives.push_back(lit("0"));
    }
    const Int128 bottom_positive = bounds.low ? std::max<Int128>(*bounds.low, 1) : 1;
    if (!bounds.high || *bounds.high >= bottom_positive) {
        for (const GrammarSymbols& run : positive_runs(bottom_positive, bounds.high, digits)) {
            alternatives.push_back(run);
        }
    }
    return new_rule(path, "integer", alternatives);
}

}  // namespace servelab
