// source_cursor.h — reading the text of a grammar or a regex one character at a time.
//
// Lab 12 support (chapter 11.6, constrained decoding); not an exercise.
// The GBNF parser (gbnf_parser.h) and the regex parser (regex_grammar.h)
// both walk their source with this: bytes for the syntax, whole UTF-8
// characters for literals, hex escapes, and one error format that says
// where the problem is ("grammar line 3 column 14: ..." or, for a one-line
// regex, "regex column 5: ..."). Columns count characters, not bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace servelab {

class SourceCursor {
  public:
    // `label` starts every error; with `by_line` errors give the line and
    // the column, without it the column counted from the start of the text.
    SourceCursor(std::string_view text, std::string label, bool by_line)
        : text_(text), label_(std::move(label)), by_line_(by_line) {}

    bool at_end() const { return pos_ >= text_.size(); }
    // The byte `ahead` bytes on, or '\0' past the end (check at_end() where
    // a NUL byte in the text must not be taken for the end).
    char peek(size_t ahead = 0) const {
        return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
    }
    // Consumes `expected` when the text continues with it.
    bool take(std::string_view expected);
    // Consumes one byte (not past the end).
    void skip() {
        if (!at_end()) ++pos_;
    }
    size_t offset() const { return pos_; }
    void seek(size_t offset) { pos_ = offset; }
    std::string_view text() const { return text_; }

    // One UTF-8 character, as its code point. Fails on a malformed one
    // (a stray byte, cut short, overlong, a surrogate, past U+10FFFF).
    uint32_t take_codepoint();
    // Exactly `num_digits` hex digits as a number; fails naming `escape`
    // ("\x", "\u", ...) when fewer follow.
    uint32_t take_hex(int num_digits, std::string_view escape);
    // Decimal digits, the value capped at `cap` + 1 (so a huge number reads
    // as "over the cap" and never overflows); -1 when no digit follows.
    int64_t take_number(int64_t cap);

    // The next character for a message: 'x', '日', a newline, the end of
    // the text, or a byte's code (\x01) when it would not print.
    std::string shown_next() const;

    // "line L column C" (or "column C") of a byte offset.
    std::string position(size_t offset) const;
    // Throws GrammarError "<label> <position>: <what>".
    [[noreturn]] void fail(size_t offset, const std::string& what) const;
    [[noreturn]] void fail(const std::string& what) const { fail(pos_, what); }

  private:
    // The length of the well-formed UTF-8 character at `offset` (its code
    // point in `codepoint`), or 0.
    size_t decode_at(size_t offset, uint32_t& codepoint) const;

    std::string_view text_;
    std::string label_;
    bool by_line_ = true;
    size_t pos_ = 0;
};

}  // namespace servelab
