// jinja_eval.cpp — the interpreter: a walk over the syntax tree.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See jinja_eval.h. The tree's height is capped by the parser (kMaxNesting),
// so this recursion is bounded; the Budget bounds the time and memory spent.
#include "reference/chat/jinja_eval.h"

#include "reference/chat/jinja_builtins.h"
#include "reference/chat/jinja_lexer.h"

namespace servelab::jinja {
namespace {

// What a statement asks of the loop around it.
enum class Flow { kNormal, kBreak, kContinue };

// Whether `value` holds a namespace, or may (a generator's items are not
// inspected: reading them would consume it).
bool holds_namespace(const Value& value) {
    if (value.is(Value::Kind::kNamespace) || value.is(Value::Kind::kGenerator)) return true;
    if (value.is(Value::Kind::kList)) {
        for (const Value& item : value.as_list()) {
            if (holds_namespace(item)) return true;
        }
    }
    if (value.is(Value::Kind::kDict)) {
        for (const auto& [key, item] : value.as_dict()) {
            if (holds_namespace(item)) return true;
        }
    }
    return false;
}

void assign(Dict& scope, const std::string& name, Value value) {
    for (auto& [key, slot] : scope) {
        if (key == name) {
            slot = std::move(value);
            return;
        }
    }
    scope.emplace_back(name, std::move(value));
}

class Interpreter {
  public:
    Interpreter(const Template& tmpl, Dict globals) : tmpl_(tmpl) {
        scopes_.push_back(std::move(globals));
    }

    std::string run() {
        exec(tmpl_.body);
        return std::move(out_);
    }

  private:
    // ------------------------------------------------------------ statements

    Flow exec(const Body& body) {
        for (const auto& stmt : body) {
            const Flow flow = exec(*stmt);
            if (flow != Flow::kNormal) return flow;
        }
        return Flow::kNormal;
    }

    // A statement's errors name its position, unless an expression inside named its own.
    Flow exec(const Stmt& stmt) {
        return at(stmt, [&] { return exec_statement(stmt); });
    }

    Flow exec_statement(const Stmt& stmt) {
        budget_.step();
        switch (stmt.kind) {
            case Stmt::Kind::kText:
                write(stmt.text, stmt.offset);
                break;
            case Stmt::Kind::kPrint: {
                const Expr& expr = *stmt.exprs[0];
                write(at(expr, [&] { return to_text(eval(expr)); }), stmt.offset);
                break;
            }
            case Stmt::Kind::kIf:
                for (size_t i = 0; i < stmt.exprs.size(); ++i) {
                    if (truthy(eval(*stmt.exprs[i]))) return exec(stmt.bodies[i]);
                }
                return exec(stmt.bodies.back());
            case Stmt::Kind::kFor:
                exec_for(stmt);
                break;
            case Stmt::Kind::kSet:
                exec_set(stmt);
                break;
            case Stmt::Kind::kBreak:
                return Flow::kBreak;
            case Stmt::Kind::kContinue:
                return Flow::kContinue;
        }
        return Flow::kNormal;
    }

    void write(const std::string& text, size_t offset) {
        if (out_.size() + text.size() > Budget::kMaxStringBytes) {
            fail_at(tmpl_.source, offset,
                    "the output is over " + std::to_string(Budget::kMaxStringBytes) + " bytes");
        }
        out_ += text;
    }

    // Binds `targets` to `value` in the innermost scope: one name takes the
    // value, several unpack it as Python does (a, b = [1, 2]).
    void bind(const std::vector<std::string>& targets, const Value& value, const Stmt& stmt) {
        if (targets.size() == 1) return assign(scopes_.back(), targets[0], value);
        const List items = at(stmt, [&] { return iterate(value, budget_); });
        if (items.size() != targets.size()) {
            fail_at(tmpl_.source, stmt.offset,
                    "cannot unpack " + std::to_string(items.size()) + " values into " +
                        std::to_string(targets.size()) + " names");
        }
        for (size_t i = 0; i < targets.size(); ++i) assign(scopes_.back(), targets[i], items[i]);
    }

    void exec_for(const Stmt& stmt) {
        const Value iterable = eval(*stmt.exprs[0]);
        List items = at(*stmt.exprs[0], [&] { return iterate(iterable, budget_); });
        // The `if` filter runs first, so loop.length and loop.last count only
        // the items that pass it. The filter sees the loop variable, not `loop`.
        if (const Expr* filter = stmt.exprs[1].get()) {
            List kept;
            for (Value& item : items) {
                scopes_.emplace_back();
                bind(stmt.targets, item, stmt);
                const bool keep = truthy(eval(*filter));
                scopes_.pop_back();
                if (keep) kept.push_back(std::move(item));
            }
            items = std::move(kept);
        }
        const int64_t n = int64_t(items.size());
        for (int64_t i = 0; i < n; ++i) {
            budget_.step();
            scopes_.emplace_back();
            bind(stmt.targets, items[size_t(i)], stmt);
            assign(scopes_.back(), "loop", loop_info(items, i));
            const Flow flow = exec(stmt.bodies[0]);
            scopes_.pop_back();
            if (flow == Flow::kBreak) break;
        }
    }

    // The `loop` variable of iteration i (0-based) over `items`.
    Value loop_info(const List& items, int64_t i) {
        const int64_t n = int64_t(items.size());
        budget_.list_items(11);
        return Value::dict({
            {"index", Value::integer(i + 1)},
            {"index0", Value::integer(i)},
            {"revindex", Value::integer(n - i)},
            {"revindex0", Value::integer(n - i - 1)},
            {"first", Value::boolean(i == 0)},
            {"last", Value::boolean(i == n - 1)},
            {"length", Value::integer(n)},
            {"previtem",
             i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item")},
            {"nextitem",
             i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item")},
            {"depth", Value::integer(1)},  // recursive loops are not supported
            {"depth0", Value::integer(0)},
        });
    }

    void exec_set(const Stmt& stmt) {
        Value value = eval(*stmt.exprs[0]);
        if (stmt.attribute.empty()) return bind(stmt.targets, value, stmt);
        const Value target = lookup(stmt.targets[0]);
        if (!target.is(Value::Kind::kNamespace)) {
            fail_at(tmpl_.source, stmt.offset,
                    "cannot assign an attribute of a non-namespace object");
        }
        // A namespace never holds a namespace, so no value can contain itself.
        if (holds_namespace(value)) {
            fail_at(tmpl_.source, stmt.offset,
                    "storing a namespace or generator in a namespace is not supported");
        }
        assign(target.namespace_attributes(), stmt.attribute, std::move(value));
    }

    Value lookup(const std::string& name) const {
        for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
            if (const Value* value = find_key(*scope, name)) return *value;
        }
        return Value::undefined("'" + name + "' is undefined");
    }

    // ------------------------------------------------------------ expressions

    // Runs `work`, giving any servelab::Error it throws the position of `node`
    // (unless it already names one).
    template <typename Node, typename Work>
    auto at(const Node& node, Work work) -> decltype(work()) {
        try {
            return work();
        } catch (const TemplateError&) {
            throw;
        } catch (const Error& error) {
            fail_at(tmpl_.source, node.offset, error.what());
        }
    }

    Value eval(const Expr& expr) {
        budget_.step();
        return at(expr, [&] { return eval_node(expr); });
    }

    Arguments eval_arguments(const Expr& expr, size_t first) {
        Arguments args;
        for (size_t i = first; i < expr.args.size(); ++i) {
            Value value = eval(*expr.args[i]);
            if (expr.keywords[i].empty()) {
                args.positional.push_back(std::move(value));
            } else {
                args.keywords.emplace_back(expr.keywords[i], std::move(value));
            }
        }
        return args;
    }

    Value eval_list(const Expr& expr) {
        budget_.list_items(expr.args.size());
        List items;
        for (const auto& item : expr.args) items.push_back(eval(*item));
        return Value::list(std::move(items));
    }

    // args holds key, value, key, value, ...
    Value eval_dict(const Expr& expr) {
        budget_.list_items(expr.args.size());
        Dict items;
        for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
            const Value key = eval(*expr.args[i]);
            if (!key.is(Value::Kind::kString))
                throw Error("dict keys other than str are not supported");
            assign(items, key.as_string(), eval(*expr.args[i + 1]));
        }
        return Value::dict(std::move(items));
    }

    // Unary - or + (`sign`) of an integer (or bool, as Python allows).
    Value eval_unary(const std::string& sign, const Value& operand) {
        if (operand.is_undefined()) throw Error(operand.undefined_reason());
        if (!operand.is_integer_like()) {
            throw Error("bad operand type for unary " + sign + ": '" +
                        std::string(type_name(operand)) + "'");
        }
        if (sign == "+") return Value::integer(operand.as_int());
        return apply_operator("-", Value::integer(0), operand, budget_);
    }

    // a < b < c is a < b and b < c, each operand evaluated once.
    Value eval_compare(const Expr& expr) {
        const auto arg = [&](size_t i) {
            return expr.args[i] ? eval(*expr.args[i]) : Value::none();
        };
        Value left = arg(0);
        for (size_t i = 0; i < expr.operators.size(); ++i) {
            Value right = arg(i + 1);
            if (!compare_op(expr.operators[i], left, right)) return Value::boolean(false);
            left = std::move(right);
        }
        return Value::boolean(true);
    }

    Value eval_node(const Expr& expr) {
        using K = Expr::Kind;
        const auto arg = [&](size_t i) {
            return expr.args[i] ? eval(*expr.args[i]) : Value::none();
        };
        switch (expr.kind) {
            case K::kLiteral:
                return expr.value;
            case K::kName:
                return lookup(expr.name);
            case K::kList:
                return eval_list(expr);
            case K::kDict:
                return eval_dict(expr);
            case K::kAttribute:
                return get_attribute(arg(0), expr.name);
            case K::kIndex:
                return get_item(arg(0), arg(1));
            case K::kSlice:
                return get_slice(arg(0), arg(1), arg(2), arg(3), budget_);
            case K::kCall:
                return eval_call(expr);
            case K::kFilter: {
                const Value input = arg(0);
                return apply_filter(expr.name, input, eval_arguments(expr, 1), budget_);
            }
            case K::kTest: {
                const Value input = arg(0);
                return Value::boolean(apply_test(expr.name, input, eval_arguments(expr, 1)) !=
                                      expr.negated);
            }
            case K::kNot:
                return Value::boolean(!truthy(arg(0)));
            case K::kNegate:
                return eval_unary(expr.name, arg(0));
            case K::kBinary: {
                const Value left = arg(0);
                return apply_operator(expr.name, left, arg(1), budget_);
            }
            // Python's and/or yield one of their operands, not a bool.
            case K::kAnd: {
                Value left = arg(0);
                return truthy(left) ? arg(1) : left;
            }
            case K::kOr: {
                Value left = arg(0);
                return truthy(left) ? left : arg(1);
            }
            case K::kCompare:
                return eval_compare(expr);
            case K::kConditional:
                if (truthy(arg(0))) return arg(1);
                return expr.args[2]
                           ? arg(2)
                           : Value::undefined("the condition was false and there is no else");
        }
        throw Error("unknown expression");
    }

    static bool compare_op(const std::string& op, const Value& a, const Value& b) {
        if (op == "==") return equals(a, b);
        if (op == "!=") return !equals(a, b);
        if (op == "in") return contains(b, a);
        if (op == "not in") return !contains(b, a);
        const int order = compare(a, b);
        if (op == "<") return order < 0;
        if (op == "<=") return order <= 0;
        if (op == ">") return order > 0;
        return order >= 0;
    }

    Value eval_call(const Expr& expr) {
        const Expr& callee = *expr.args[0];
        if (callee.kind == Expr::Kind::kAttribute) {  // a method: "text".strip()
            const Value object = eval(*callee.args[0]);
            return call_method(object, callee.name, eval_arguments(expr, 1), budget_);
        }
        const Value function = eval(callee);
        if (function.is_undefined()) throw Error(function.undefined_reason());
        if (!function.is(Value::Kind::kFunction)) {
            throw Error("'" + std::string(type_name(function)) + "' object is not callable");
        }
        const Arguments args = eval_arguments(expr, 1);
        if (function.as_string() == "raise_exception") {
            // Hugging Face's raise_exception(message): the template refuses the
            // conversation; its message is the error, as the template wrote it.
            const std::string message = args.positional.empty() ? "" : to_text(args.positional[0]);
            throw TemplateError("chat template raised an exception: " + message);
        }
        // namespace(name=value, ...)
        if (!args.positional.empty()) throw Error("namespace() takes keyword arguments only");
        Dict attributes;
        for (const auto& [name, value] : args.keywords) {
            if (holds_namespace(value)) {
                throw Error("storing a namespace or generator in a namespace is not supported");
            }
            assign(attributes, name, value);
        }
        return Value::new_namespace(std::move(attributes));
    }

    const Template& tmpl_;
    std::vector<Dict> scopes_;  // [0]: globals and top-level sets; then one per loop iteration
    std::string out_;
    Budget budget_;
};

}  // namespace

std::string render_template(const Template& tmpl, Dict globals) {
    return Interpreter(tmpl, std::move(globals)).run();
}

}  // namespace servelab::jinja
