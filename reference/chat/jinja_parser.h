// jinja_parser.h — the syntax tree of a chat template, and the parser that builds it.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// The grammar and operator precedence are jinja2's (lowest first):
//   a if c else b,  or,  and,  not,  == != < <= > >= in, not in,  + -,  ~,
//   * %,  unary - +,  then postfix .name [i] [a:b:c] (args) and | filter, is test.
// Statements: {% for %} (with loop.*, an `if` filter, break, continue),
// {% if %}/{% elif %}/{% else %}, {% set %} (names, or namespace attributes).
// Anything else jinja2 accepts (macros, float literals, /, **, tuples, ...)
// is refused here, at load time, naming the construct and its position.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reference/chat/jinja_value.h"

namespace servelab::jinja {

struct Expr {
    enum class Kind {
        kLiteral,      // value
        kName,         // name
        kList,         // [args...]
        kDict,         // {args[0]: args[1], args[2]: args[3], ...}
        kAttribute,    // args[0].name
        kIndex,        // args[0][args[1]]
        kSlice,        // args[0][args[1]:args[2]:args[3]]; an omitted bound is null
        kCall,         // args[0](args[1]...): a global function or, on an kAttribute, a method
        kFilter,       // args[0] | name(args[1]...)
        kTest,         // args[0] is [not] name(args[1]...)
        kNot,          // not args[0]
        kNegate,       // name (- or +) args[0]
        kBinary,       // args[0] name args[1], name one of + - * % ~
        kAnd,          // args[0] and args[1] (Python's: yields an operand)
        kOr,           // args[0] or args[1]
        kCompare,      // args[0] operators[0] args[1] operators[1] args[2] ...
        kConditional,  // args[1] if args[0] else args[2] (args[2] null: Undefined)
    };
    Kind kind;
    size_t offset;  // in the normalized source, for error messages
    int depth = 1;  // height of this subtree; capped, so evaluating it cannot overflow the stack
    std::string name;
    Value value;
    bool negated = false;  // kTest: `is not`
    std::vector<std::unique_ptr<Expr>> args;
    // kCall and kFilter: the keyword of each argument in args, "" for positional ones.
    std::vector<std::string> keywords;
    std::vector<std::string> operators;  // kCompare: ==, !=, <, <=, >, >=, in, not in
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
    enum class Kind {
        kText,   // text
        kPrint,  // {{ exprs[0] }}
        kIf,     // exprs[i] guards bodies[i]; bodies.back() is the else branch
        kFor,    // for targets in exprs[0] if exprs[1] (null: no filter): bodies[0]
        kSet,    // set targets = exprs[0], or set targets[0].attribute = exprs[0]
        kBreak,
        kContinue,
    };
    Kind kind;
    size_t offset;
    std::string text;
    std::vector<std::unique_ptr<Expr>> exprs;
    std::vector<Body> bodies;
    std::vector<std::string> targets;
    std::string attribute;
};

struct Template {
    std::string source;  // normalized, as offsets refer to it
    Body body;
};

// How deep statements may nest, and how tall one expression may grow.
inline constexpr int kMaxNesting = 100;

// Throws TemplateError naming the line and column of the first problem.
Template parse_template(std::string_view source);

}  // namespace servelab::jinja
