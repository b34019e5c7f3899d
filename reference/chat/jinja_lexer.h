// jinja_lexer.h — split a chat template into text and the tokens inside its tags.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// A template is text with three kinds of tags: {{ expression }} prints,
// {% statement %} controls, {# comment #} is dropped. Whitespace around tags
// is settled here, once, with the settings Hugging Face renders chat templates
// with: trim_blocks (the newline right after %} or #} is dropped),
// lstrip_blocks (spaces and tabs before {% or {# on their own line are
// dropped), a '-' inside the tag ({%- -%} {{- -}} {#- -#}) drops all
// whitespace on that side, a '+' ({%+ +%}) keeps it. Like jinja2, every
// \r\n and \r becomes \n and one newline at the very end is dropped.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/error.h"

namespace servelab::jinja {

struct Token {
    enum class Kind {
        kText,            // text between tags, whitespace control applied
        kPrintBegin,      // {{
        kPrintEnd,        // }}
        kStatementBegin,  // {%
        kStatementEnd,    // %}
        kName,            // identifier or keyword (and, if, not, ...)
        kString,          // a string literal; text is its value, escapes decoded
        kInteger,         // decimal digits, '_' separators removed
        kOperator,        // + - * % ~ == != < <= > >= = . : | , ( ) [ ] { } / // **
        kEnd,             // end of the template
    };
    Kind kind;
    std::string text;
    size_t offset;  // where the token starts in TokenizedTemplate::source
};

struct TokenizedTemplate {
    std::string source;         // the template after newline normalization; offsets point here
    std::vector<Token> tokens;  // ends with kEnd
};

// Throws TemplateError (naming line and column) for an unclosed tag, comment
// or string, an unbalanced bracket, or a construct outside the subset.
TokenizedTemplate tokenize(std::string_view source);

// A servelab::Error whose message is final: it names the place in the
// template, or is the template's own raise_exception message.
class TemplateError : public Error {
  public:
    using Error::Error;
};

// Throws TemplateError("chat template, line L, column C: what").
[[noreturn]] void fail_at(std::string_view source, size_t offset, const std::string& what);

}  // namespace servelab::jinja
