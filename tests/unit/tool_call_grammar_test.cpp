// tool_call_grammar_test.cpp — the grammar that forces tool calls (Lab 12 support, chapter 11.6).
//
// tool_choice "required" or a named function is kept by a grammar built from
// the format's syntax and each function's parameters schema. Every sentence
// of it must read back, with the format's own parser, as calls to offered
// functions (the named one alone, when named; one call at most when
// parallel_tool_calls is false) whose arguments are JSON objects with the
// required parameters, of the schema's types.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "reference/chat/tool_call_grammar.h"
#include "reference/chat/tool_call_parser.h"
#include "reference/constrained/grammar_sampler.h"
#include "reference/constrained/json_schema_grammar.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

ToolRequest two_tools(ToolChoice choice, bool parallel) {
    ToolRequest tools;
    tools.choice = choice;
    tools.parallel_tool_calls = parallel;
    tools.functions.push_back({"get_weather", "",
                               nlohmann::ordered_json::parse(R"({"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": false})"),
                               false});
    tools.functions.push_back({"add", "", nlohmann::ordered_json::parse(R"({"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": false})"),
                               false});
    for (const ToolFunction& f : tools.functions) {
        tools.tools.push_back({{"type", "function"}, {"function", {{"name", f.name}}}});
    }
    return tools;
}

// The calls' arguments hold what the function requires, of the right types.
void expect_valid_arguments(const ParsedToolCall& call, const std::string& sentence) {
    const nlohmann::json arguments = nlohmann::json::parse(call.arguments);
    if (call.name == "get_weather") {
        ASSERT_TRUE(arguments.contains("city") && arguments["city"].is_string()) << sentence;
        if (arguments.contains("unit")) {
            EXPECT_TRUE(arguments["unit"] == "celsius" || arguments["unit"] == "fahrenheit")
                << sentence;
        }
        EXPECT_LE(arguments.size(), 2u) << "no property beyond the schema's: " << sentence;
    } else {
        ASSERT_EQ(call.name, "add") << sentence;
        EXPECT_TRUE(arguments["a"].is_number_integer() && arguments["b"].is_number_integer())
            << sentence;
        EXPECT_EQ(arguments.size(), 2u) << sentence;
    }
}

TEST(ToolCallGrammar, EverySentenceReadsBackAsValidCallsInEachFormat) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    for (const ToolCallFormat format :
         {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
        for (const bool parallel : {true, false}) {
            SCOPED_TRACE(std::string(tool_call_format_name(format)) +
                         (parallel ? " parallel" : " one call"));
            ToolRequest tools = two_tools(ToolChoice::kRequired, parallel);
            tools.format = format;
            const Grammar grammar = tool_call_grammar(tools, tool_call_syntax(format));
            const GrammarSampler sampler(grammar);
            std::set<size_t> call_counts;
            for (int i = 0; i < 60; ++i) {
                const std::string sentence = sampler.sample(random.engine(), 400);
                const ToolCallParse parse = parse_tool_calls(format, sentence);
                ASSERT_TRUE(parse.called) << "not read back as calls: " << sentence;
                EXPECT_EQ(parse.content, "") << sentence;
                call_counts.insert(parse.calls.size());
                if (!parallel) EXPECT_EQ(parse.calls.size(), 1u) << sentence;
                for (const ParsedToolCall& call : parse.calls) {
                    expect_valid_arguments(call, sentence);
                }
            }
            if (parallel) EXPECT_GT(call_counts.size(), 1u) << "several calls were never drawn";
        }
    }
}

TEST(ToolCallGrammar, ANamedChoiceCallsOnlyThatFunction) {
    test::RandomSource random;
    SCOPED_TRACE(random.trace());
    ToolRequest tools = two_tools(ToolChoice::kNamed, true);
    tools.chosen_function = "add";
    tools.format = ToolCallFormat::kHermes;
    const Grammar grammar = tool_call_grammar(tools, tool_call_syntax(tools.format));
    const GrammarSampler sampler(grammar);  // keeps a reference: the grammar must outlive it
    for (int i = 0; i < 40; ++i) {
        const std::string sentence = sampler.sample(random.engine(), 300);
        const ToolCallParse parse = parse_tool_calls(tools.format, sentence);
        ASSERT_TRUE(parse.called) << sentence;
        ASSERT_EQ(parse.calls.size(), 1u) << "a named choice is one call: " << sentence;
        EXPECT_EQ(parse.calls[0].name, "add") << sentence;
    }
}

TEST(ToolCallGrammar, ParametersThatCannotBeEnforcedNameTheFunction) {
    ToolRequest tools = two_tools(ToolChoice::kRequired, true);
    tools.functions[1].parameters = nlohmann::ordered_json::parse(
        R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}})");
    try {
        tool_call_grammar(tools, tool_call_syntax(ToolCallFormat::kHermes));
        ADD_FAILURE() << "multipleOf was accepted";
    } catch (const SchemaError& e) {
        EXPECT_NE(std::string(e.what()).find("'add'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("multipleOf"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace servelab
