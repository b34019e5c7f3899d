// source_cursor.cpp — see source_cursor.h.
#include "reference/constrained/source_cursor.h"

#include <fmt/format.h>

#include <algorithm>

#include "reference/constrained/grammar.h"
#include "reference/constrained/utf8_ranges.h"

namespace servelab {
namespace {

bool is_continuation(uint8_t byte) {
    return (byte & 0xC0) == 0x80;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::string SourceCursor::shown_next() const {
    if (at_end()) return "the end of the text";
    const auto byte = uint8_t(peek());
    if (byte == '\n' || byte == '\r') return "a newline";
    if (byte >= 0x20 && byte < 0x7F) return fmt::format("'{}'", char(byte));
    uint32_t codepoint = 0;
    const size_t num_bytes = decode_at(pos_, codepoint);
    if (byte >= 0x80 && num_bytes > 0) return fmt::format("'{}'", text_.substr(pos_, num_bytes));
    return fmt::format("\\x{:02X}", byte);
}

bool SourceCursor::take(std::string_view expected) {
    if (text_.substr(pos_, expected.size()) != expected) return false;
    pos_ += expected.size();
    return true;
}

size_t SourceCursor::decode_at(size_t offset, uint32_t& codepoint) const {
    const auto lead = uint8_t(offset < text_.size() ? text_[offset] : 0);
    // The length a lead byte announces, the bits it carries, and the least
    // code point that needs that length (a smaller one is overlong).
    size_t num_bytes = 0;
    uint32_t smallest = 0;
    if (lead < 0x80) {
        num_bytes = 1, codepoint = lead;
    } else if (lead >= 0xC0 && lead < 0xE0) {
        num_bytes = 2, codepoint = lead & 0x1F, smallest = 0x80;
    } else if (lead >= 0xE0 && lead < 0xF0) {
        num_bytes = 3, codepoint = lead & 0x0F, smallest = 0x800;
    } else if (lead >= 0xF0 && lead < 0xF8) {
        num_bytes = 4, codepoint = lead & 0x07, smallest = 0x10000;
    }
    if (num_bytes == 0 || offset + num_bytes > text_.size()) return 0;
    for (size_t i = 1; i < num_bytes; ++i) {
        const auto b = uint8_t(text_[offset + i]);
        if (!is_continuation(b)) return 0;
        codepoint = (codepoint << 6) | (b & 0x3F);
    }
    const bool surrogate = codepoint >= 0xD800 && codepoint <= 0xDFFF;
    if (codepoint < smallest || codepoint > kMaxCodepoint || surrogate) return 0;
    return num_bytes;
}

uint32_t SourceCursor::take_codepoint() {
    uint32_t codepoint = 0;
    const size_t num_bytes = decode_at(pos_, codepoint);
    if (num_bytes == 0) {
        fail(fmt::format("malformed UTF-8 (a character cannot start with byte \\x{:02X} here)",
                         uint8_t(peek())));
    }
    pos_ += num_bytes;
    return codepoint;
}

uint32_t SourceCursor::take_hex(int num_digits, std::string_view escape) {
    const size_t start = pos_;
    uint32_t value = 0;
    for (int i = 0; i < num_digits; ++i) {
        const int digit = hex_value(peek());
        if (digit < 0) {
            fail(start, fmt::format("the escape {} needs {} hex digits", escape, num_digits));
        }
        value = value * 16 + uint32_t(digit);
        skip();
    }
    return value;
}

int64_t SourceCursor::take_number(int64_t cap) {
    if (at_end() || peek() < '0' || peek() > '9') return -1;
    int64_t value = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
        value = std::min(value * 10 + (peek() - '0'), cap + 1);
        skip();
    }
    return value;
}

std::string SourceCursor::position(size_t offset) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
        if (by_line_ && text_[i] == '\n') {
            ++line, column = 1;
        } else if (!is_continuation(uint8_t(text_[i]))) {
            ++column;
        }
    }
    if (!by_line_) return fmt::format("column {}", column);
    return fmt::format("line {} column {}", line, column);
}

void SourceCursor::fail(size_t offset, const std::string& what) const {
    throw GrammarError(fmt::format("{} {}: {}", label_, position(offset), what));
}

}  // namespace servelab
