// json_schema_formats.cpp — the string formats a schema may ask for, as
// grammar rules: date, time, date-time (RFC 3339), email, uuid, uri.
//
// Lab 12 (chapter 11.6, constrained decoding); support, not the exercise.
// Exact where the format is exact: a date is a real day of the Gregorian
// calendar (years 0001 to 9999, February 29 in leap years only), a time has
// hours 00-23, minutes and seconds 00-59 (no leap second), at most 9
// fraction digits and an offset (Z or +hh:mm / -hh:mm; upper-case T and Z
// only). An email is a reasonable subset of RFC 5322's addr-spec: a
// dot-atom local part (letters, digits and !#$%&'*+/=?^_`{|}~-, dots
// between runs of them) "@" a domain of at least two dot-separated labels
// (letters, digits, inner hyphens); no quoted local parts, IP literals or
// length limits. A uuid is 8-4-4-4-12 hex digits, either case. A uri is
// RFC 3986's scheme "://" authority path ["?" query] ["#" fragment], with a
// host of unreserved characters and %HH (no user info, no IP literal) and
// an optional port. Other formats (hostname, ipv4, uri-reference, ...) are
// refused, not ignored.
#include <fmt/format.h>

#include "reference/constrained/json_schema_converter.h"

namespace servelab {
namespace {

ByteSet digits(char low, char high) {
    ByteSet set;
    set.add_range(uint8_t(low), uint8_t(high));
    return set;
}

ByteSet one_of(std::string_view bytes) {
    ByteSet set;
    for (const char c : bytes) set.add(uint8_t(c));
    return set;
}

GrammarSymbols d(char low = '0', char high = '9') {
    return bytes_of(digits(low, high));
}
GrammarSymbols any_of(std::string_view bytes) {
    return bytes_of(one_of(bytes));
}

// full-date, with the number of days of each month.
int32_t date_rule(JsonSchemaConverter& c, const std::string& path) {
    const int32_t year =
        c.new_rule(path, "year",
                   {d('1', '9') + d() + d() + d(), lit("0") + d('1', '9') + d() + d(),
                    lit("00") + d('1', '9') + d(), lit("000") + d('1', '9')});
    // 04, 08, ..., 96: the two-digit multiples of 4 but 00.
    const int32_t fourth = c.new_rule(path, "fourth",
                                      {any_of("02468") + any_of("48"),
                                       any_of("13579") + any_of("26"), any_of("2468") + lit("0")});
    const int32_t leap_year =
        c.new_rule(path, "leap-year", {d() + d() + ref(fourth), ref(fourth) + lit("00")});
    const int32_t month_31 =
        c.new_rule(path, "month31", {lit("0") + any_of("13578"), lit("1") + any_of("02")});
    const int32_t month_30 = c.new_rule(path, "month30", {lit("0") + any_of("469"), lit("11")});
    const int32_t day_28 =
        c.new_rule(path, "day28", {lit("0") + d('1', '9'), lit("1") + d(), lit("2") + d('0', '8')});
    const int32_t day_30 =
        c.new_rule(path, "day30", {lit("0") + d('1', '9'), any_of("12") + d(), lit("30")});
    const int32_t day_31 = c.new_rule(
        path, "day31", {lit("0") + d('1', '9'), any_of("12") + d(), lit("3") + any_of("01")});
    return c.new_rule(path, "date",
                      {ref(year) + lit("-") + ref(month_31) + lit("-") + ref(day_31),
                       ref(year) + lit("-") + ref(month_30) + lit("-") + ref(day_30),
                       ref(year) + lit("-02-") + ref(day_28), ref(leap_year) + lit("-02-29")});
}

// full-time: hh:mm:ss, an optional fraction, an offset.
int32_t time_rule(JsonSchemaConverter& c, const std::string& path) {
    const int32_t hour = c.new_rule(path, "hour", {any_of("01") + d(), lit("2") + d('0', '3')});
    const GrammarSymbols sixty = d('0', '5') + d();
    int32_t fraction_digits = c.new_rule(path, "fraction-9", {{}});
    for (int k = 8; k >= 1; --k) {
        fraction_digits =
            c.new_rule(path, fmt::format("fraction-{}", k), {{}, d() + ref(fraction_digits)});
    }
    const int32_t fraction =
        c.new_rule(path, "fraction", {{}, lit(".") + d() + ref(fraction_digits)});
    const int32_t offset =
        c.new_rule(path, "offset", {lit("Z"), any_of("+-") + ref(hour) + lit(":") + sixty});
    return c.new_rule(
        path, "time",
        {ref(hour) + lit(":") + sixty + lit(":") + sixty + ref(fraction) + ref(offset)});
}

// local-part "@" domain (see the header comment for the subset).
int32_t email_rule(JsonSchemaConverter& c, const std::string& path) {
    ByteSet atext = one_of("!#$%&'*+/=?^_`{|}~-");
    ByteSet alnum = digits('0', '9');
    alnum.add_range('a', 'z');
    alnum.add_range('A', 'Z');
    for (int b = 0; b < 256; ++b) {
        if (alnum.contains(uint8_t(b))) atext.add(uint8_t(b));
    }
    const int32_t atom = c.builder().fresh_rule(JsonSchemaConverter::rule_name(path, "atom"));
    c.builder().add_alternative(atom, bytes_of(atext));
    c.builder().add_alternative(atom, bytes_of(atext) + ref(atom));
    const int32_t local = c.builder().fresh_rule(JsonSchemaConverter::rule_name(path, "local"));
    c.builder().add_alternative(local, ref(atom));
    c.builder().add_alternative(local, ref(atom) + lit(".") + ref(local));
    // label ::= alnum tail;  tail ::= "" | alnum tail | hyphens alnum tail
    const int32_t hyphens = c.builder().fresh_rule(JsonSchemaConverter::rule_name(path, "hyphens"));
    c.builder().add_alternative(hyphens, lit("-"));
    c.builder().add_alternative(hyphens, lit("-") + ref(hyphens));
    const int32_t tail = c.builder().fresh_rule(JsonSchemaConverter::rule_name(path, "label-tail"));
    c.builder().add_alternative(tail, {});
    c.builder().add_alternative(tail, bytes_of(alnum) + ref(tail));
    c.builder().add_alternative(tail, ref(hyphens) + bytes_of(alnum) + ref(tail));
    const int32_t label = c.new_rule(path, "label", {bytes_of(alnum) + ref(tail)});
    const int32_t labels = c.builder().fresh_rule(JsonSchemaConverter::rule_name(path, "labels"));
    c.builder().add_alternative(labels, ref(label));
    c.builder().add_alternative(labels, ref(label) + lit(".") + ref(labels));
    c.check_rule_count(path);
    return c.new_rule(path, "email", {ref(local) + lit("@") + ref(label) + lit(".") + ref(labels)});
}

// `item` repeated, zero or more times: rest ::= "" | item rest.
int32_t repeated(JsonSchemaConverter& c, const std::string& path, const std::string& what,
                 const std::vector<GrammarSymbols>& items) {
    const int32_t rest = c.builder().fresh_rule(JsonSchemaConverter::rule_name(path, what));
    c.builder().add_alternative(rest, {});
    for (const GrammarSymbols& item : items) c.builder().add_alternative(rest, item + ref(rest));
    c.check_rule_count(path);
    return rest;
}

// scheme "://" host [":" port] path ["?" query] ["#" fragment] (RFC 3986's
// characters: unreserved, %HH, sub-delims, ":" and "@" in the path).
int32_t uri_rule(JsonSchemaConverter& c, const std::string& path) {
    ByteSet alpha;
    alpha.add_range('a', 'z');
    alpha.add_range('A', 'Z');
    const ByteSet unreserved =
        one_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~");
    const GrammarSymbols percent =
        lit("%") + any_of("0123456789abcdefABCDEF") + any_of("0123456789abcdefABCDEF");
    const GrammarSymbols pchar =
        any_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@");
    const int32_t scheme_rest =
        repeated(c, path, "scheme",
                 {any_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.")});
    const int32_t host_rest = repeated(c, path, "host", {bytes_of(unreserved), percent});
    const int32_t port = c.new_rule(
        path, "port", {{}, lit(":") + d() + ref(repeated(c, path, "port-digits", {d()}))});
    const int32_t segment = repeated(c, path, "segment", {pchar, percent});
    const int32_t segments = repeated(c, path, "path", {lit("/") + ref(segment)});
    const int32_t query_chars = repeated(c, path, "query", {pchar, percent, any_of("/?")});
    const int32_t query = c.new_rule(path, "query-part", {{}, lit("?") + ref(query_chars)});
    const int32_t fragment = c.new_rule(path, "fragment", {{}, lit("#") + ref(query_chars)});
    return c.new_rule(path, "uri",
                      {bytes_of(alpha) + ref(scheme_rest) + lit("://") + bytes_of(unreserved) +
                       ref(host_rest) + ref(port) + ref(segments) + ref(query) + ref(fragment)});
}

int32_t uuid_rule(JsonSchemaConverter& c, const std::string& path) {
    const ByteSet hex = one_of("0123456789abcdefABCDEF");
    GrammarSymbols symbols;
    for (const int run : {8, 4, 4, 4, 12}) {
        if (!symbols.empty()) symbols = symbols + lit("-");
        for (int k = 0; k < run; ++k) symbols.push_back(GrammarSymbol::of_bytes(hex));
    }
    return c.new_rule(path, "uuid", {symbols});
}

}  // namespace

int32_t JsonSchemaConverter::format_rule(const std::string& format, const std::string& path) {
    // Built once per format (a date's rules are the same everywhere).
    const std::string key = "format:" + format;
    if (shared_.count(key)) return shared_[key];
    int32_t body = kNoValue;
    const std::string name = "format-" + format;  // the rules' names
    if (format == "date") {
        body = date_rule(*this, name);
    } else if (format == "time") {
        body = time_rule(*this, name);
    } else if (format == "date-time") {
        const int32_t date = date_rule(*this, name);
        body = new_rule(name, "", {ref(date) + lit("T") + ref(time_rule(*this, name))});
    } else if (format == "email") {
        body = email_rule(*this, name);
    } else if (format == "uuid") {
        body = uuid_rule(*this, name);
    } else if (format == "uri") {
        body = uri_rule(*this, name);
    } else {
        throw_schema_error(path, fmt::format("format '{}' is not supported (supported: date, "
                                             "time, date-time, email, uuid, uri)",
                                             format));
    }
    return shared_[key] = named_rule("format-" + format, {lit("\"") + ref(body) + lit("\"")});
}

}  // namespace servelab
