// tool_call_grammar.cpp — see tool_call_grammar.h.
#include "reference/chat/tool_call_grammar.h"

#include <fmt/format.h>

#include <vector>

#include "reference/constrained/json_schema_grammar.h"

namespace servelab {
namespace {

// One call to `function`: {"<name_key>": "<name>", "<arguments_key>": ARGS},
// spaced as the templates render calls.
std::vector<GrammarSymbol> call_symbols(GrammarBuilder& builder, const ToolFunction& function,
                                        const ToolCallSyntax& syntax) {
    int32_t arguments = -1;
    try {
        // Compact, as templates write calls: no room for runaway spaces.
        arguments = add_json_schema_rule(builder, function.parameters, "args-" + function.name,
                                         {.compact_whitespace = true});
    } catch (const SchemaError& e) {
        throw SchemaError(fmt::format("function '{}': {}", function.name, e.what()), e.keyword());
    }
    std::vector<GrammarSymbol> symbols = literal_symbols(fmt::format(
        "{{\"{}\": \"{}\", \"{}\": ", syntax.name_key, function.name, syntax.arguments_key));
    symbols.push_back(GrammarSymbol::of_rule(arguments));
    symbols.push_back(GrammarSymbol::of_byte('}'));
    return symbols;
}

// A rule matching one call, wrapped in the format's per-call text.
int32_t add_call_rule(GrammarBuilder& builder, const ToolRequest& tools,
                      const ToolCallSyntax& syntax) {
    const int32_t call = builder.fresh_rule("call");
    for (const ToolFunction& function : tools.functions) {
        if (tools.choice == ToolChoice::kNamed && function.name != tools.chosen_function) continue;
        std::vector<GrammarSymbol> symbols = literal_symbols(syntax.call_begin);
        for (const GrammarSymbol& s : call_symbols(builder, function, syntax)) symbols.push_back(s);
        for (const GrammarSymbol& s : literal_symbols(syntax.call_end)) symbols.push_back(s);
        builder.add_alternative(call, std::move(symbols));
    }
    if (!builder.defined(call)) {
        throw GrammarError(fmt::format("tool_choice names '{}', which is not among the tools",
                                       tools.chosen_function));
    }
    return call;
}

}  // namespace

Grammar tool_call_grammar(const ToolRequest& tools, const ToolCallSyntax& syntax) {
    GrammarBuilder builder;
    const int32_t root = builder.rule("root");
    const int32_t call = add_call_rule(builder, tools, syntax);
    std::vector<GrammarSymbol> answer = literal_symbols(syntax.calls_begin);
    answer.push_back(GrammarSymbol::of_rule(call));
    if (tools.max_calls() > 1) {
        // more ::= separator call more | ""  (right recursion: short stacks)
        const int32_t more = builder.fresh_rule("more-calls");
        std::vector<GrammarSymbol> another = literal_symbols(syntax.call_separator);
        another.push_back(GrammarSymbol::of_rule(call));
        another.push_back(GrammarSymbol::of_rule(more));
        builder.add_alternative(more, std::move(another));
        builder.add_alternative(more, {});
        answer.push_back(GrammarSymbol::of_rule(more));
    }
    for (const GrammarSymbol& s : literal_symbols(syntax.calls_end)) answer.push_back(s);
    builder.add_alternative(root, std::move(answer));
    return builder.build("root");
}

std::string tool_call_grammar_key(const ToolRequest& tools) {
    return fmt::format("tools:{}:{}:{}:{}:{}", tool_call_format_name(tools.format),
                       int(tools.choice), tools.chosen_function, tools.max_calls() > 1 ? "n" : "1",
                       tools.tools.dump());
}

}  // namespace servelab
