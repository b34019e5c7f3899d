// jinja_parser.cpp — recursive descent over the tokens, one function per precedence level.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See jinja_parser.h. Each parse_* function mirrors the jinja2 parser method
// of the same name, so the trees (and so the results) agree with jinja2's.
#include "reference/chat/jinja_parser.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>

#include "reference/chat/jinja_builtins.h"
#include "reference/chat/jinja_lexer.h"

namespace servelab::jinja {
namespace {

using ExprPtr = std::unique_ptr<Expr>;
using Kind = Token::Kind;

// Tags jinja2 knows that the subset leaves out, so the error can say so.
constexpr std::string_view kUnsupportedTags[] = {
    "macro", "call", "filter", "block", "extends",    "include", "import",
    "from",  "with", "trans",  "do",    "autoescape", "endset",  "generation"};

// jinja2 globals that templates may call but servelab does not provide.
constexpr std::string_view kUnsupportedFunctions[] = {"range", "dict", "lipsum", "cycler",
                                                      "joiner"};

template <typename Range>
bool is_one_of(const Range& range, std::string_view name) {
    return std::find(std::begin(range), std::end(range), name) != std::end(range);
}

class Parser {
  public:
    explicit Parser(TokenizedTemplate tokens) : t_(std::move(tokens)) {}

    Template run() {
        Template result;
        result.body = parse_body({}, nullptr);
        result.source = std::move(t_.source);
        return result;
    }

  private:
    // ------------------------------------------------------------ tokens
    const Token& peek(size_t ahead = 0) const {
        return t_.tokens[std::min(next_ + ahead, t_.tokens.size() - 1)];
    }
    const Token& advance() {
        const Token& token = peek();
        if (next_ < t_.tokens.size() - 1) ++next_;
        return token;
    }
    bool at(Kind kind, std::string_view text) const {
        return peek().kind == kind && peek().text == text;
    }
    bool at_name(std::string_view name) const { return at(Kind::kName, name); }
    bool at_op(std::string_view op) const { return at(Kind::kOperator, op); }
    bool skip_op(std::string_view op) {
        if (!at_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(std::string_view name) {
        if (!at_name(name)) return false;
        advance();
        return true;
    }
    [[noreturn]] void fail(const std::string& what) const {
        fail_at(t_.source, peek().offset, what);
    }
    [[noreturn]] void fail_unexpected(std::string_view expected) const {
        fail("expected " + std::string(expected) + ", found " + describe(peek()));
    }
    static std::string describe(const Token& token) {
        switch (token.kind) {
            case Kind::kText:
                return "text";
            case Kind::kPrintBegin:
                return "'{{'";
            case Kind::kPrintEnd:
                return "'}}'";
            case Kind::kStatementBegin:
                return "'{%'";
            case Kind::kStatementEnd:
                return "'%}'";
            case Kind::kString:
                return "a string";
            case Kind::kInteger:
                return "a number";
            case Kind::kEnd:
                return "the end of the template";
            default:
                return "'" + token.text + "'";
        }
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) fail_unexpected("'" + std::string(op) + "'");
    }
    std::string expect_name() {
        if (peek().kind != Kind::kName) fail_unexpected("a name");
        return advance().text;
    }
    void expect_statement_end() {
        if (peek().kind != Kind::kStatementEnd) fail_unexpected("'%}'");
        advance();
    }

    // Counts how deeply the parser has recursed, so that "((((..." or
    // "not not not ..." cannot overflow the stack.
    class NestingGuard {
      public:
        explicit NestingGuard(Parser& parser) : parser_(parser) {
            if (++parser_.nesting_ > kMaxNesting) parser_.fail("the template nests too deeply");
        }
        ~NestingGuard() { --parser_.nesting_; }
        NestingGuard(const NestingGuard&) = delete;
        NestingGuard& operator=(const NestingGuard&) = delete;

      private:
        Parser& parser_;
    };

    // ------------------------------------------------------------ statements

    // Statements up to one of `end_tags` ({% endif %} ...), whose name is
    // stored in *found; with no end tags, up to the end of the template.
    // The first end tag is the one named when the template ends too early.
    Body parse_body(std::initializer_list<std::string_view> end_tags, std::string* found) {
        NestingGuard guard(*this);
        Body body;
        while (true) {
            const Token& token = peek();
            if (token.kind == Kind::kEnd) {
                if (end_tags.size() == 0) return body;
                fail("missing {% " + std::string(*end_tags.begin()) + " %}");
            }
            if (token.kind == Kind::kText) {
                body.push_back(make_stmt(Stmt::Kind::kText, token.offset));
                body.back()->text = advance().text;
            } else if (token.kind == Kind::kPrintBegin) {
                body.push_back(parse_print());
            } else if (token.kind == Kind::kStatementBegin) {
                const Token& tag = peek(1);
                if (tag.kind == Kind::kName && is_one_of(end_tags, tag.text)) {
                    advance();
                    *found = advance().text;
                    return body;
                }
                body.push_back(parse_statement());
            } else {
                fail_unexpected("text or a tag");
            }
        }
    }

    static std::unique_ptr<Stmt> make_stmt(Stmt::Kind kind, size_t offset) {
        auto stmt = std::make_unique<Stmt>();
        stmt->kind = kind;
        stmt->offset = offset;
        return stmt;
    }

    std::unique_ptr<Stmt> parse_print() {
        auto stmt = make_stmt(Stmt::Kind::kPrint, advance().offset);
        stmt->exprs.push_back(parse_expression(true));
        if (at_op(",")) fail("tuples are not supported");
        if (peek().kind != Kind::kPrintEnd) fail_unexpected("'}}'");
        advance();
        return stmt;
    }

    std::unique_ptr<Stmt> parse_statement() {
        advance();  // {%
        if (peek().kind != Kind::kName) fail_unexpected("a tag name");
        const std::string tag = peek().text;
        if (tag == "for") return parse_for();
        if (tag == "if") return parse_if();
        if (tag == "set") return parse_set();
        if (tag == "break" || tag == "continue") {
            if (loops_ == 0) fail("{% " + tag + " %} outside a loop");
            auto stmt = make_stmt(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue,
                                  advance().offset);
            expect_statement_end();
            return stmt;
        }
        if (tag == "raw") fail("{% raw %} blocks are not supported");
        if (is_one_of(kUnsupportedTags, tag)) fail("{% " + tag + " %} is not supported");
        fail("unexpected tag {% " + tag + " %}");
    }

    std::unique_ptr<Stmt> parse_for() {
        auto stmt = make_stmt(Stmt::Kind::kFor, advance().offset);
        stmt->targets = parse_targets();
        if (!skip_name("in")) fail_unexpected("'in'");
        stmt->exprs.push_back(parse_expression(/*with_conditional=*/false));
        stmt->exprs.push_back(skip_name("if") ? parse_expression(true) : nullptr);
        if (at_name("recursive")) fail("recursive loops are not supported");
        expect_statement_end();
        ++loops_;
        std::string end;
        stmt->bodies.push_back(parse_body({"endfor", "else"}, &end));
        --loops_;
        if (end == "else") fail("{% for %} ... {% else %} is not supported");
        expect_statement_end();
        return stmt;
    }

    std::unique_ptr<Stmt> parse_if() {
        auto stmt = make_stmt(Stmt::Kind::kIf, advance().offset);
        std::string end = "elif";
        while (end == "elif") {
            stmt->exprs.push_back(parse_expression(true));
            expect_statement_end();
            stmt->bodies.push_back(parse_body({"endif", "elif", "else"}, &end));
        }
        if (end == "else") {
            expect_statement_end();
            stmt->bodies.push_back(parse_body({"endif"}, &end));
        } else {
            stmt->bodies.emplace_back();  // no else branch: an empty one
        }
        expect_statement_end();
        return stmt;
    }

    std::unique_ptr<Stmt> parse_set() {
        auto stmt = make_stmt(Stmt::Kind::kSet, advance().offset);
        if (peek().kind == Kind::kName && peek(1).kind == Kind::kOperator && peek(1).text == ".") {
            stmt->targets.push_back(advance().text);
            advance();  // .
            stmt->attribute = expect_name();
        } else {
            stmt->targets = parse_targets();
        }
        if (peek().kind == Kind::kStatementEnd)
            fail("{% set %} ... {% endset %} blocks are not supported");
        expect_op("=");
        stmt->exprs.push_back(parse_expression(true));
        if (at_op(",")) fail("tuples are not supported");
        expect_statement_end();
        return stmt;
    }

    // name or name, name, ... (the unpacking targets of for and set)
    std::vector<std::string> parse_targets() {
        std::vector<std::string> names = {expect_name()};
        while (skip_op(",")) names.push_back(expect_name());
        for (const std::string& name : names) {
            if (name == "true" || name == "false" || name == "none" || name == "loop") {
                fail("cannot assign to '" + name + "'");
            }
        }
        return names;
    }

    // ------------------------------------------------------------ expressions

    // A node over `args`, as tall as its tallest argument plus one.
    ExprPtr make(Expr::Kind kind, size_t offset, std::vector<ExprPtr> args = {}) {
        auto expr = std::make_unique<Expr>();
        expr->kind = kind;
        expr->offset = offset;
        for (const ExprPtr& arg : args) {
            if (arg) expr->depth = std::max(expr->depth, arg->depth + 1);
        }
        if (expr->depth > kMaxNesting) fail_at(t_.source, offset, "expression nests too deeply");
        expr->args = std::move(args);
        return expr;
    }
    ExprPtr make(Expr::Kind kind, size_t offset, ExprPtr a, ExprPtr b = nullptr) {
        std::vector<ExprPtr> args;
        args.push_back(std::move(a));
        if (b) args.push_back(std::move(b));
        return make(kind, offset, std::move(args));
    }

    // parse_condexpr: `a if cond else b`. A for loop's iterable leaves the
    // `if` alone: there it starts the loop filter.
    ExprPtr parse_expression(bool with_conditional) {
        NestingGuard guard(*this);
        ExprPtr expr = parse_or();
        while (with_conditional && at_name("if")) {
            const size_t offset = advance().offset;
            std::vector<ExprPtr> args;
            args.push_back(parse_or());
            args.push_back(std::move(expr));
            args.push_back(skip_name("else") ? parse_expression(true) : nullptr);
            expr = make(Expr::Kind::kConditional, offset, std::move(args));
        }
        return expr;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (at_name("or")) {
            const size_t offset = advance().offset;
            left = make(Expr::Kind::kOr, offset, std::move(left), parse_and());
        }
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (at_name("and")) {
            const size_t offset = advance().offset;
            left = make(Expr::Kind::kAnd, offset, std::move(left), parse_not());
        }
        return left;
    }

    ExprPtr parse_not() {
        if (!at_name("not")) return parse_compare();
        NestingGuard guard(*this);
        const size_t offset = advance().offset;
        return make(Expr::Kind::kNot, offset, parse_not());
    }

    ExprPtr parse_compare() {
        const size_t offset = peek().offset;
        std::vector<ExprPtr> operands;
        operands.push_back(parse_math1());
        std::vector<std::string> operators;
        while (true) {
            static constexpr std::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">="};
            if (peek().kind == Kind::kOperator && is_one_of(kOps, peek().text)) {
                operators.push_back(advance().text);
            } else if (skip_name("in")) {
                operators.push_back("in");
            } else if (at_name("not") && peek(1).kind == Kind::kName && peek(1).text == "in") {
                advance();
                advance();
                operators.push_back("not in");
            } else {
                break;
            }
            operands.push_back(parse_math1());
        }
        if (operators.empty()) return std::move(operands[0]);
        ExprPtr expr = make(Expr::Kind::kCompare, offset, std::move(operands));
        expr->operators = std::move(operators);
        return expr;
    }

    ExprPtr binary(std::string op, size_t offset, ExprPtr left, ExprPtr right) {
        ExprPtr expr = make(Expr::Kind::kBinary, offset, std::move(left), std::move(right));
        expr->name = std::move(op);
        return expr;
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (at_op("+") || at_op("-")) {
            const Token& op = advance();
            left = binary(op.text, op.offset, std::move(left), parse_concat());
        }
        return left;
    }

    ExprPtr parse_concat() {
        ExprPtr left = parse_math2();
        while (at_op("~")) {
            const Token& op = advance();
            left = binary("~", op.offset, std::move(left), parse_math2());
        }
        return left;
    }

    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (at_op("*") || at_op("%") || at_op("/") || at_op("//")) {
            if (at_op("/") || at_op("//")) fail("division is not supported (it needs floats)");
            const Token& op = advance();
            left = binary(op.text, op.offset, std::move(left), parse_pow());
        }
        return left;
    }

    ExprPtr parse_pow() {
        ExprPtr left = parse_unary(true);
        if (at_op("**")) fail("the ** operator is not supported");
        return left;
    }

    // jinja2 applies a filter to the whole unary expression: -x|abs is (-x)|abs.
    ExprPtr parse_unary(bool with_filter) {
        ExprPtr node;
        if (at_op("-") || at_op("+")) {
            NestingGuard guard(*this);
            const Token& op = advance();
            node = make(Expr::Kind::kNegate, op.offset, parse_unary(false));
            node->name = op.text;
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
    }

    ExprPtr literal(Value value, size_t offset) {
        ExprPtr expr = make(Expr::Kind::kLiteral, offset);
        expr->value = std::move(value);
        return expr;
    }

    ExprPtr parse_primary() {
        const Token& token = peek();
        const size_t offset = token.offset;
        switch (token.kind) {
            case Kind::kName: {
                const std::string name = advance().text;
                if (name == "true" || name == "True") return literal(Value::boolean(true), offset);
                if (name == "false" || name == "False")
                    return literal(Value::boolean(false), offset);
                if (name == "none" || name == "None") return literal(Value::none(), offset);
                ExprPtr expr = make(Expr::Kind::kName, offset);
                expr->name = name;
                return expr;
            }
            case Kind::kString: {
                std::string text;  // adjacent literals join, as in Python
                while (peek().kind == Kind::kString) text += advance().text;
                return literal(Value::string(std::move(text)), offset);
            }
            case Kind::kInteger: {
                int64_t value = 0;
                const std::string& digits = token.text;
                const auto [end, error] =
                    std::from_chars(digits.data(), digits.data() + digits.size(), value);
                if (error != std::errc() || end != digits.data() + digits.size()) {
                    fail("integer literal does not fit in 64 bits");
                }
                advance();
                return literal(Value::integer(value), offset);
            }
            case Kind::kOperator:
                if (skip_op("(")) {
                    ExprPtr inner = parse_expression(true);
                    if (at_op(",")) fail("tuples are not supported");
                    expect_op(")");
                    return inner;
                }
                if (at_op("[")) return parse_list();
                if (at_op("{")) return parse_dict();
                break;
            default:
                break;
        }
        fail_unexpected("an expression");
    }

    ExprPtr parse_list() {
        const size_t offset = advance().offset;  // [
        std::vector<ExprPtr> items;
        while (!at_op("]")) {
            if (!items.empty()) expect_op(",");
            if (at_op("]")) break;  // a trailing comma
            items.push_back(parse_expression(true));
        }
        advance();
        return make(Expr::Kind::kList, offset, std::move(items));
    }

    ExprPtr parse_dict() {
        const size_t offset = advance().offset;  // {
        std::vector<ExprPtr> items;
        while (!at_op("}")) {
            if (!items.empty()) expect_op(",");
            if (at_op("}")) break;
            items.push_back(parse_expression(true));
            expect_op(":");
            items.push_back(parse_expression(true));
        }
        advance();
        return make(Expr::Kind::kDict, offset, std::move(items));
    }

    ExprPtr parse_postfix(ExprPtr node) {
        while (true) {
            if (at_op(".") || at_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (at_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        while (true) {
            if (at_op("|")) {
                node = parse_filter(std::move(node));
            } else if (at_name("is")) {
                node = parse_test(std::move(node));
            } else if (at_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        const Token& token = advance();
        const size_t offset = token.offset;
        if (token.text == ".") {
            if (peek().kind == Kind::kInteger) {  // foo.0 is foo[0]
                ExprPtr index = parse_primary();
                return make(Expr::Kind::kIndex, offset, std::move(node), std::move(index));
            }
            ExprPtr expr = make(Expr::Kind::kAttribute, offset, std::move(node));
            expr->name = expect_name();
            return expr;
        }
        // [index] or [start:stop:step], each bound optional
        std::vector<ExprPtr> bounds;
        bool is_slice = false;
        bounds.push_back(at_op(":") ? nullptr : parse_expression(true));
        for (int colon = 0; colon < 2 && skip_op(":"); ++colon) {
            is_slice = true;
            bounds.push_back(at_op(":") || at_op("]") ? nullptr : parse_expression(true));
        }
        if (at_op(",")) fail("tuples are not supported");
        expect_op("]");
        if (!is_slice)
            return make(Expr::Kind::kIndex, offset, std::move(node), std::move(bounds[0]));
        bounds.resize(3);
        std::vector<ExprPtr> args;
        args.push_back(std::move(node));
        for (ExprPtr& bound : bounds) args.push_back(std::move(bound));
        return make(Expr::Kind::kSlice, offset, std::move(args));
    }

    // (a, b, name=c): positional arguments first, as jinja2 requires.
    void parse_arguments(std::vector<ExprPtr>& args, std::vector<std::string>& keywords) {
        expect_op("(");
        bool first = true;
        while (!at_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (at_op(")")) break;
            if (at_op("*") || at_op("**")) fail("*args and **kwargs are not supported");
            std::string keyword;
            if (peek().kind == Kind::kName && peek(1).kind == Kind::kOperator &&
                peek(1).text == "=") {
                keyword = advance().text;
                advance();
            } else if (!keywords.empty() && !keywords.back().empty()) {
                fail("a positional argument follows a keyword argument");
            }
            args.push_back(parse_expression(true));
            keywords.push_back(keyword);
        }
        advance();
    }

    ExprPtr parse_call(ExprPtr callee) {
        const size_t offset = peek().offset;
        if (callee->kind == Expr::Kind::kAttribute) {
            if (!is_method(callee->name)) {
                fail_at(t_.source, callee->offset,
                        "method ." + callee->name + "() is not supported");
            }
        } else if (callee->kind == Expr::Kind::kName) {
            if (is_one_of(kUnsupportedFunctions, callee->name)) {
                fail_at(t_.source, callee->offset,
                        "function " + callee->name + "() is not supported");
            }
        } else {
            fail("only functions and methods can be called");
        }
        std::vector<ExprPtr> args;
        std::vector<std::string> keywords = {""};
        args.push_back(std::move(callee));
        parse_arguments(args, keywords);
        ExprPtr expr = make(Expr::Kind::kCall, offset, std::move(args));
        expr->keywords = std::move(keywords);
        return expr;
    }

    ExprPtr parse_filter(ExprPtr node) {
        advance();  // |
        const size_t offset = peek().offset;
        const std::string name = expect_name();
        if (!is_filter(name)) fail_at(t_.source, offset, "filter '" + name + "' is not supported");
        std::vector<ExprPtr> args;
        std::vector<std::string> keywords = {""};
        args.push_back(std::move(node));
        if (at_op("(")) parse_arguments(args, keywords);
        ExprPtr expr = make(Expr::Kind::kFilter, offset, std::move(args));
        expr->name = name;
        expr->keywords = std::move(keywords);
        return expr;
    }

    // `is [not] name`, with arguments in parentheses or one bare argument
    // (`is divisibleby 3`), exactly where jinja2 looks for one.
    ExprPtr parse_test(ExprPtr node) {
        advance();  // is
        const bool negated = skip_name("not");
        const size_t offset = peek().offset;
        const std::string name = expect_name();
        if (!is_test(name)) fail_at(t_.source, offset, "test '" + name + "' is not supported");
        std::vector<ExprPtr> args;
        std::vector<std::string> keywords = {""};
        args.push_back(std::move(node));
        const Kind next = peek().kind;
        const bool starts_argument =
            next == Kind::kName || next == Kind::kString || next == Kind::kInteger ||
            (next == Kind::kOperator && (peek().text == "[" || peek().text == "{"));
        if (at_op("(")) {
            parse_arguments(args, keywords);
        } else if (starts_argument && !at_name("else") && !at_name("or") && !at_name("and")) {
            if (at_name("is")) fail("tests cannot be chained");
            args.push_back(parse_postfix(parse_primary()));
            keywords.push_back("");
        }
        ExprPtr expr = make(Expr::Kind::kTest, offset, std::move(args));
        expr->name = name;
        expr->negated = negated;
        expr->keywords = std::move(keywords);
        return expr;
    }

    TokenizedTemplate t_;
    size_t next_ = 0;
    int nesting_ = 0;
    int loops_ = 0;  // enclosing {% for %} bodies, for break and continue
};

}  // namespace

Template parse_template(std::string_view source) {
    return Parser(tokenize(source)).run();
}

}  // namespace servelab::jinja
