// jinja_lexer.cpp — text, tags and whitespace control, the way jinja2 lexes them.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See jinja_lexer.h. The rules follow jinja2's lexer with Hugging Face's
// settings; tests/unit/chat_template_test.cpp checks them against jinja2.
#include "reference/chat/jinja_lexer.h"

#include <cctype>

#include "reference/chat/jinja_value.h"
#include "reference/model/unicode_categories.h"

namespace servelab::jinja {
namespace {

// jinja2 splits the source at \r\n, \r and \n and joins the lines with \n,
// dropping the last line when it is empty (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] == '\r') {
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
            out += '\n';
        } else {
            out += source[i];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

bool is_name_start(char c) {
    return std::isalpha(uint8_t(c)) || c == '_';
}
bool is_name_char(char c) {
    return std::isalnum(uint8_t(c)) || c == '_';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class Lexer {
  public:
    explicit Lexer(std::string source) { out_.source = std::move(source); }

    TokenizedTemplate run() {
        const std::string_view src = out_.source;
        while (pos_ < src.size()) {
            const size_t open = find_tag_open(pos_);
            std::string_view text = src.substr(pos_, open - pos_);
            if (open == src.size()) {
                emit(Token::Kind::kText, std::string(text), pos_);
                break;
            }
            const char type = src[open + 1];  // '{' print, '%' statement, '#' comment
            const char sign = open + 2 < src.size() ? src[open + 2] : '\0';
            const bool has_sign = sign == '-' || sign == '+';
            if (sign == '-') {
                text = strip_space(text, /*left=*/false, /*right=*/true);
            } else if (sign != '+' && type != '{') {
                text = lstrip_block(text, /*line_starting=*/pos_ == 0 || src[pos_ - 1] == '\n');
            }
            emit(Token::Kind::kText, std::string(text), pos_);
            pos_ = open + 2 + (has_sign ? 1 : 0);
            if (type == '#') {
                skip_comment(open);
            } else {
                lex_tag(type == '%', open);
            }
        }
        out_.tokens.push_back({Token::Kind::kEnd, "", src.size()});
        return std::move(out_);
    }

  private:
    // The next "{{", "{%" or "{#" at or after `from`, or the source size.
    size_t find_tag_open(size_t from) const {
        const std::string_view src = out_.source;
        for (size_t i = src.find('{', from); i != std::string_view::npos;
             i = src.find('{', i + 1)) {
            if (i + 1 < src.size() &&
                (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')) {
                return i;
            }
        }
        return src.size();
    }

    // lstrip_blocks: drop the spaces between the start of a line and a block
    // or comment tag, when nothing else stands between them.
    static std::string_view lstrip_block(std::string_view text, bool line_starting) {
        const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
        if (line_start == 0 && !line_starting) return text;
        const std::string_view tail = text.substr(line_start);
        if (!tail.empty() && strip_space(tail, true, true).empty())
            return text.substr(0, line_start);
        return text;
    }

    // After a tag's closing marker: '-' drops all whitespace, '+' keeps it,
    // and trim_blocks drops one newline after %} and #} (never after }}).
    void after_tag_end(char sign, bool trim_newline) {
        const std::string_view src = out_.source;
        if (sign == '-') {
            pos_ = src.size() - strip_space(src.substr(pos_), true, false).size();
        } else if (sign != '+' && trim_newline && pos_ < src.size() && src[pos_] == '\n') {
            ++pos_;
        }
    }

    void skip_comment(size_t open) {
        const std::string_view src = out_.source;
        const size_t body = pos_;
        const size_t close = src.find("#}", body);
        if (close == std::string_view::npos) fail_at(src, open, "comment is never closed with #}");
        const char sign = close > body ? src[close - 1] : '\0';
        pos_ = close + 2;
        after_tag_end(sign, /*trim_newline=*/true);
    }

    void lex_tag(bool statement, size_t open) {
        const std::string_view src = out_.source;
        if (statement) reject_raw_block(open);
        emit(statement ? Token::Kind::kStatementBegin : Token::Kind::kPrintBegin, "", open);
        std::string brackets;  // the closing brackets still owed, innermost last
        while (true) {
            // A closing marker only counts outside brackets: {{ {'a': 1}}} is fine.
            if (brackets.empty() && close_tag(statement)) return;
            if (pos_ >= src.size()) {
                fail_at(src, open,
                        statement ? "tag is never closed with %}" : "tag is never closed with }}");
            }
            const size_t start = pos_;
            const char c = src[pos_];
            const size_t after_space =
                src.size() - strip_space(src.substr(pos_), true, false).size();
            if (after_space > pos_) {
                pos_ = after_space;
            } else if (is_name_start(c)) {
                while (pos_ < src.size() && is_name_char(src[pos_])) ++pos_;
                emit(Token::Kind::kName, std::string(src.substr(start, pos_ - start)), start);
            } else if (is_digit(c)) {
                lex_integer();
            } else if (c == '\'' || c == '"') {
                lex_string();
            } else {
                lex_operator(brackets);
            }
        }
    }

    // Whether the tag ends at pos_; if so consumes the marker and what
    // whitespace control drops after it.
    bool close_tag(bool statement) {
        const std::string_view rest = std::string_view(out_.source).substr(pos_);
        const std::string_view marker = statement ? "%}" : "}}";
        const char sign = rest.empty() ? '\0' : rest[0];
        const bool signed_marker =
            (sign == '-' || (statement && sign == '+')) && rest.substr(1, 2) == marker;
        if (!signed_marker && rest.substr(0, 2) != marker) return false;
        emit(statement ? Token::Kind::kStatementEnd : Token::Kind::kPrintEnd, "", pos_);
        pos_ += signed_marker ? 3 : 2;
        after_tag_end(signed_marker ? sign : '\0', /*trim_newline=*/statement);
        return true;
    }

    // {% raw %} switches the lexer off until {% endraw %}; not in the subset.
    void reject_raw_block(size_t open) {
        const std::string_view src = out_.source;
        const size_t word = src.size() - strip_space(src.substr(pos_), true, false).size();
        if (src.substr(word, 3) == "raw" &&
            (word + 3 >= src.size() || !is_name_char(src[word + 3]))) {
            fail_at(src, open, "{% raw %} blocks are not supported");
        }
    }

    void lex_integer() {
        const std::string_view src = out_.source;
        const size_t start = pos_;
        std::string digits;
        while (pos_ < src.size() &&
               (is_digit(src[pos_]) ||
                (src[pos_] == '_' && pos_ + 1 < src.size() && is_digit(src[pos_ + 1])))) {
            if (src[pos_] != '_') digits += src[pos_];
            ++pos_;
        }
        const char next = pos_ < src.size() ? src[pos_] : '\0';
        const char after = pos_ + 1 < src.size() ? src[pos_ + 1] : '\0';
        // jinja2 reads 1.5 and 1e5 as floats, except right after a dot (a.0.1).
        const bool after_dot = start > 0 && src[start - 1] == '.';
        if (!after_dot && ((next == '.' && is_digit(after)) || next == 'e' || next == 'E')) {
            fail_at(src, start, "float literals are not supported");
        }
        const bool prefixed =
            digits == "0" && std::string_view("xXoObB").find(next) != std::string_view::npos;
        if (prefixed || (digits.size() > 1 && digits[0] == '0')) {
            fail_at(src, start, "integer literals other than plain decimal are not supported");
        }
        if (is_name_start(next)) fail_at(src, start, "unexpected character after a number");
        emit(Token::Kind::kInteger, digits, start);
    }

    // A string literal, decoded as jinja2 does: Python's unicode-escape rules.
    void lex_string() {
        const std::string_view src = out_.source;
        const size_t start = pos_;
        const char quote = src[pos_++];
        std::string value;
        while (true) {
            if (pos_ >= src.size()) fail_at(src, start, "string literal is never closed");
            const char c = src[pos_++];
            if (c == quote) break;
            if (c != '\\') {
                value += c;
                continue;
            }
            if (pos_ >= src.size()) fail_at(src, start, "string literal is never closed");
            decode_escape(value, start);
        }
        emit(Token::Kind::kString, std::move(value), start);
    }

    // The escape after a backslash (pos_ is just past the backslash).
    void decode_escape(std::string& value, size_t literal_start) {
        const std::string_view src = out_.source;
        const char c = src[pos_++];
        switch (c) {
            case '\n':
                return;  // a backslash at the end of a line joins the lines
            case '\\':
                value += '\\';
                return;
            case '\'':
                value += '\'';
                return;
            case '"':
                value += '"';
                return;
            case 'a':
                value += '\a';
                return;
            case 'b':
                value += '\b';
                return;
            case 'f':
                value += '\f';
                return;
            case 'n':
                value += '\n';
                return;
            case 'r':
                value += '\r';
                return;
            case 't':
                value += '\t';
                return;
            case 'v':
                value += '\v';
                return;
            case 'x':
                return append_code_point(value, read_hex(2, literal_start), literal_start);
            case 'u':
                return append_code_point(value, read_hex(4, literal_start), literal_start);
            case 'U':
                return append_code_point(value, read_hex(8, literal_start), literal_start);
            case 'N':
                fail_at(src, literal_start, "\\N{...} escapes are not supported");
            default:
                break;
        }
        if (c >= '0' && c <= '7') {  // up to three octal digits
            uint32_t cp = uint32_t(c - '0');
            for (int i = 0; i < 2 && pos_ < src.size() && src[pos_] >= '0' && src[pos_] <= '7';
                 ++i) {
                cp = cp * 8 + uint32_t(src[pos_++] - '0');
            }
            return append_code_point(value, cp, literal_start);
        }
        if (uint8_t(c) >= 0x80) {
            fail_at(src, literal_start,
                    "a backslash before a non-ASCII character is not supported");
        }
        value += '\\';  // Python keeps unknown escapes as written
        value += c;
    }

    uint32_t read_hex(int digits, size_t literal_start) {
        const std::string_view src = out_.source;
        uint32_t cp = 0;
        for (int i = 0; i < digits; ++i) {
            const int digit = pos_ < src.size() ? hex_value(src[pos_]) : -1;
            if (digit < 0) fail_at(src, literal_start, "truncated \\x, \\u or \\U escape");
            cp = cp * 16 + uint32_t(digit);
            ++pos_;
        }
        return cp;
    }

    void append_code_point(std::string& value, uint32_t cp, size_t literal_start) {
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            fail_at(out_.source, literal_start, "escape is not a Unicode scalar value");
        }
        append_utf8(value, cp);
    }

    void lex_operator(std::string& brackets) {
        const std::string_view src = out_.source;
        const size_t start = pos_;
        static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
        for (const std::string_view op : kTwoChar) {
            if (src.substr(pos_, 2) == op) {
                pos_ += 2;
                emit(Token::Kind::kOperator, std::string(op), start);
                return;
            }
        }
        const char c = src[pos_];
        if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
            fail_at(src, start, "unexpected character in a tag");
        }
        if (c == '(' || c == '[' || c == '{') brackets += c == '(' ? ')' : c == '[' ? ']' : '}';
        if (c == ')' || c == ']' || c == '}') {
            if (brackets.empty() || brackets.back() != c) {
                fail_at(src, start, std::string("unexpected '") + c + "'");
            }
            brackets.pop_back();
        }
        ++pos_;
        emit(Token::Kind::kOperator, std::string(1, c), start);
    }

    void emit(Token::Kind kind, std::string text, size_t offset) {
        if (kind == Token::Kind::kText && text.empty()) return;
        out_.tokens.push_back({kind, std::move(text), offset});
    }

    TokenizedTemplate out_;
    size_t pos_ = 0;
};

}  // namespace

TokenizedTemplate tokenize(std::string_view source) {
    return Lexer(normalize_newlines(source)).run();
}

void fail_at(std::string_view source, size_t offset, const std::string& what) {
    offset = std::min(offset, source.size());
    const std::string_view before = source.substr(0, offset);
    size_t line = 1;
    for (const char c : before) line += c == '\n';
    const size_t column = offset - (before.rfind('\n') + 1) + 1;
    throw TemplateError("chat template, line " + std::to_string(line) + ", column " +
                        std::to_string(column) + ": " + what);
}

}  // namespace servelab::jinja
