// tool_call_parser_test.cpp — a model's answer read back as tool calls, in each format.
//
// Part of the serving tests (chapter 11, serving: tool calling). Checked:
//   - the format each committed chat template shows (detect_tool_call_format);
//   - what each template writes for a call in the history, its format's
//     parser reads back (the template teaches the model the format);
//   - random calls written by the format's ToolCallSyntax (the description a
//     grammar is built from), with content before them where the format has
//     some, parse back to the same names and arguments (compared as JSON);
//   - the slack each parser allows, and malformed answers, which are content;
//   - random mutations of well-formed answers never throw, and whatever
//     still parses has a name and an arguments object;
//   - nesting past kMaxCallDepth is content, at bounded cost.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "reference/chat/chat_template.h"
#include "reference/chat/tool_call_format.h"
#include "reference/chat/tool_call_parser.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using Json = nlohmann::ordered_json;
using test::source_path;

const ToolCallFormat kFormats[] = {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                                   ToolCallFormat::kMistral};

std::string read_template(const std::string& name) {
    std::ifstream in(source_path("data/golden/chat_templates/" + name + ".jinja"),
                     std::ios::binary);
    if (!in) throw std::runtime_error("cannot read template " + name);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string shown(std::string_view text) {
    return nlohmann::json(std::string(text))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TEST(ToolCallFormat, EachCommittedTemplateShowsItsFormat) {
    const std::vector<std::pair<std::string, ToolCallFormat>> expected = {
        {"qwen2.5-7b-instruct", ToolCallFormat::kHermes},
        {"llama-3.1-8b-instruct", ToolCallFormat::kLlama3Json},
        {"mistral-nemo-instruct-2407", ToolCallFormat::kMistral},
        {"llama-3-8b-instruct", ToolCallFormat::kNone},
        {"mistral-7b-instruct-v0.2", ToolCallFormat::kNone},
        {"mistral-7b-instruct-v0.2-legacy", ToolCallFormat::kNone},
        {"smollm2-135m-instruct", ToolCallFormat::kNone},
        {"deepseek-v2-chat", ToolCallFormat::kNone},
    };
    for (const auto& [name, format] : expected) {
        EXPECT_EQ(tool_call_format_name(detect_tool_call_format(read_template(name))),
                  tool_call_format_name(format))
            << name;
    }
}

// The text a template writes for an assistant turn that calls
// get_weather(city="Paris", unit="celsius"): the rendering with that turn,
// less the rendering up to it, cut at the end-of-turn text (a control token
// the model ends with, never part of its decoded answer).
std::string rendered_call(const std::string& name, const std::string& eos) {
    const std::vector<ChatMessage> asked = {{"user", "Weather in Paris?"}};
    std::vector<ChatMessage> answered = asked;
    ChatMessage call{"assistant", ""};
    call.content_is_null = true;
    call.tool_calls = std::vector<ToolCall>{
        {"abc123XYZ", "get_weather", R"({"city": "Paris", "unit": "celsius"})"}};
    answered.push_back(call);
    const Json tools =
        Json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
    const ChatTemplate tmpl = ChatTemplate::parse(read_template(name));
    ChatTemplateInputs before{asked, true, "<s>", eos, tools};
    ChatTemplateInputs after{answered, false, "<s>", eos, tools};
    const std::string prompt = tmpl.render(before);
    const std::string whole = tmpl.render(after);
    if (!whole.starts_with(prompt))
        return "(the rendering with the call does not extend the prompt)";
    const std::string answer = whole.substr(prompt.size());
    return answer.substr(0, answer.find(eos));
}

TEST(ToolCallParser, WhatEachTemplateWritesForACallParsesBack) {
    for (const auto& [name, eos] :
         std::vector<std::pair<std::string, std::string>>{{"qwen2.5-7b-instruct", "<|im_end|>"},
                                                          {"llama-3.1-8b-instruct", "<|eot_id|>"},
                                                          {"mistral-nemo-instruct-2407", "</s>"}}) {
        const std::string answer = rendered_call(name, eos);
        const ToolCallParse parse =
            parse_tool_calls(detect_tool_call_format(read_template(name)), answer);
        ASSERT_TRUE(parse.called) << name << " wrote " << shown(answer);
        ASSERT_EQ(parse.calls.size(), 1u) << name;
        EXPECT_EQ(parse.calls[0].name, "get_weather") << name;
        EXPECT_EQ(Json::parse(parse.calls[0].arguments),
                  Json({{"city", "Paris"}, {"unit", "celsius"}}))
            << name;
        EXPECT_EQ(parse.content, "") << name;
    }
}

// Strings that stress a parser: its markers, brackets, quotes, escapes, Unicode.
std::string random_string(test::RandomSource& rng) {
    static const std::vector<std::string> pieces = {"a",
                                                    "Paris",
                                                    " ",
                                                    "\"",
                                                    "\\",
                                                    "{",
                                                    "}",
                                                    "[",
                                                    "]",
                                                    ";",
                                                    ",",
                                                    "</tool_call>",
                                                    "<tool_call>",
                                                    "[TOOL_CALLS]",
                                                    "<|python_tag|>",
                                                    "\n",
                                                    "é",
                                                    "日本",
                                                    "🙂",
                                                    ":",
                                                    "null"};
    std::string text;
    for (int64_t i = rng.integer(0, 5); i > 0; --i)
        text += pieces[rng.integer(0, int64_t(pieces.size()) - 1)];
    return text;
}

Json random_json(test::RandomSource& rng, int depth) {
    switch (rng.integer(0, depth >= 3 ? 3 : 5)) {
        case 0:
            return random_string(rng);
        case 1:
            return rng.integer(-1000, 1000);
        case 2:
            return rng.integer(0, 1) == 1;
        case 3:
            return nullptr;
        case 4: {
            Json list = Json::array();
            for (int64_t i = rng.integer(0, 3); i > 0; --i)
                list.push_back(random_json(rng, depth + 1));
            return list;
        }
        default: {
            Json object = Json::object();
            for (int64_t i = rng.integer(0, 3); i > 0; --i)
                object[random_string(rng)] = random_json(rng, depth + 1);
            return object;
        }
    }
}

struct Call {
    std::string name;
    Json arguments;
};

std::vector<Call> random_calls(test::RandomSource& rng) {
    std::vector<Call> calls(size_t(rng.integer(1, 3)));
    for (Call& call : calls) {
        call.name = std::string(1, char('a' + rng.integer(0, 25))) + "_" +
                    std::to_string(rng.integer(0, 99));
        call.arguments = Json::object();
        for (int64_t i = rng.integer(0, 3); i > 0; --i)
            call.arguments[random_string(rng)] = random_json(rng, 1);
    }
    return calls;
}

// The answer a grammar built from ToolCallSyntax would force, after `content`.
std::string written(const ToolCallSyntax& syntax, const std::string& content,
                    const std::vector<Call>& calls) {
    std::string text = content + syntax.calls_begin;
    for (size_t i = 0; i < calls.size(); ++i) {
        if (i > 0) text += syntax.call_separator;
        text += syntax.call_begin + "{\"" + syntax.name_key + "\": " + Json(calls[i].name).dump() +
                ", \"" + syntax.arguments_key + "\": " + calls[i].arguments.dump() + "}" +
                syntax.call_end;
    }
    return text + syntax.calls_end;
}

// Text before the calls, which cannot hold a marker of the format.
std::string random_content(test::RandomSource& rng) {
    static const std::vector<std::string> pieces = {
        "Let me check", ".", " ", "\n", "{", "<tool", "[TOOL", "é", "}", "call>", "CALLS]"};
    std::string text;
    for (int64_t i = rng.integer(0, 6); i > 0; --i)
        text += pieces[rng.integer(0, int64_t(pieces.size()) - 1)];
    for (const std::string marker : {"<tool_call>", "[TOOL_CALLS]"}) {
        for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker))
            text.erase(at, 1);
    }
    return text;
}

TEST(ToolCallParser, CallsWrittenByTheSyntaxParseBack) {
    test::RandomSource rng;
    for (const ToolCallFormat format : kFormats) {
        const ToolCallSyntax syntax = tool_call_syntax(format);
        for (int trial = 0; trial < 300; ++trial) {
            const std::vector<Call> calls = random_calls(rng);
            const std::string content = syntax.content_before_calls ? random_content(rng) : "";
            const std::string answer = written(syntax, content, calls);
            const ToolCallParse parse = parse_tool_calls(format, answer);
            ASSERT_TRUE(parse.called)
                << tool_call_format_name(format)
                << " did not read its own syntax: " << shown(answer) << "\n  " << rng.trace();
            EXPECT_EQ(parse.content, content) << shown(answer) << "\n  " << rng.trace();
            ASSERT_EQ(parse.calls.size(), calls.size()) << shown(answer) << "\n  " << rng.trace();
            for (size_t i = 0; i < calls.size(); ++i) {
                EXPECT_EQ(parse.calls[i].name, calls[i].name) << shown(answer);
                EXPECT_EQ(Json::parse(parse.calls[i].arguments), calls[i].arguments)
                    << "arguments changed: " << shown(answer) << "\n  " << rng.trace();
            }
            // parallel_tool_calls false: the first call alone.
            const ToolCallParse first = parse_tool_calls(format, answer, 1);
            ASSERT_EQ(first.calls.size(), 1u);
            EXPECT_EQ(first.calls[0].name, calls[0].name);
        }
    }
}

struct Example {
    ToolCallFormat format;
    std::string answer;
    bool called;
    std::string content;             // when called
    std::vector<std::string> names;  // when called
};

TEST(ToolCallParser, SlackAndMalformedAnswers) {
    using F = ToolCallFormat;
    const std::string call = R"({"name": "f", "arguments": {"a": 1}})";
    const std::vector<Example> examples = {
        // hermes
        {F::kHermes, "Sure.\n<tool_call>\n" + call + "\n</tool_call>", true, "Sure.\n", {"f"}},
        {F::kHermes, "<tool_call>" + call, true, "", {"f"}},  // last block left open
        {F::kHermes,
         "<tool_call>" + call + "</tool_call> and <tool_call>" + call + "</tool_call> end",
         true,
         "",
         {"f", "f"}},  // text between and after is dropped
        {F::kHermes,
         R"(<tool_call>{"name": "g", "parameters": {"x": "</tool_call>"}}</tool_call>)",
         true,
         "",
         {"g"}},
        {F::kHermes,
         R"(<tool_call>{"name": "g", "arguments": "{\"x\": 2}"}</tool_call>)",
         true,
         "",
         {"g"}},
        {F::kHermes, "no calls here", false, "", {}},
        {F::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}", false, "", {}},
        {F::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>", false, "", {}},
        {F::kHermes, "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>", false, "", {}},
        {F::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", false, "", {}},
        {F::kHermes, "<tool_call>{\"name\": \"f\"}</tool_call>", false, "", {}},
        {F::kHermes, "<tool_call>not json</tool_call>", false, "", {}},
        {F::kHermes, "<tool_call>" + call + " junk</tool_call>", false, "", {}},
        {F::kHermes, "<tool_call>" + call + "</tool_call><tool_call>oops", false, "", {}},
        {F::kHermes,
         "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\xff\"}}</tool_call>",
         false,
         "",
         {}},
        // llama3_json
        {F::kLlama3Json, R"({"name": "f", "parameters": {"a": 1}})", true, "", {"f"}},
        {F::kLlama3Json, "  <|python_tag|>" + call + " ; " + call + "\n", true, "", {"f", "f"}},
        {F::kLlama3Json, "Sure: " + call, false, "", {}},
        {F::kLlama3Json, call + " and more", false, "", {}},
        {F::kLlama3Json, call + ";", false, "", {}},
        {F::kLlama3Json, R"({"answer": 42})", false, "", {}},
        {F::kLlama3Json, "[" + call + "]", false, "", {}},
        {F::kLlama3Json, "", false, "", {}},
        // mistral
        {F::kMistral,
         "Checking.[TOOL_CALLS][" + call + ", " + call + "]",
         true,
         "Checking.",
         {"f", "f"}},
        {F::kMistral, "[TOOL_CALLS] " + call, true, "", {"f"}},  // one object alone
        {F::kMistral, "[TOOL_CALLS][" + call + "] trailing", true, "", {"f"}},
        {F::kMistral, "[TOOL_CALLS]", false, "", {}},
        {F::kMistral, "[TOOL_CALLS][]", false, "", {}},
        {F::kMistral, "[TOOL_CALLS][{\"name\": 5, \"arguments\": {}}]", false, "", {}},
        {F::kMistral, "[TOOL_CALLS][" + call + ", 3]", false, "", {}},
        {F::kMistral, "[TOOL_CALLS][" + call, false, "", {}},
        {F::kMistral, call, false, "", {}},
        // no format
        {F::kNone, "<tool_call>" + call + "</tool_call>", false, "", {}},
    };
    for (const Example& example : examples) {
        const ToolCallParse parse = parse_tool_calls(example.format, example.answer);
        const std::string label =
            std::string(tool_call_format_name(example.format)) + " " + shown(example.answer);
        ASSERT_EQ(parse.called, example.called) << label;
        if (!example.called) {
            EXPECT_TRUE(parse.calls.empty() && parse.content.empty()) << label;
            continue;
        }
        EXPECT_EQ(parse.content, example.content) << label;
        std::vector<std::string> names;
        for (const ParsedToolCall& c : parse.calls) names.push_back(c.name);
        EXPECT_EQ(names, example.names) << label;
    }
}

TEST(ToolCallParser, MutatedAnswersNeverThrow) {
    test::RandomSource rng;
    static const std::string alphabet = "{}[]\",:; \\<>/tool_call|TOOL_CALLS]\xff\xc3";
    size_t still_called = 0, total = 0;
    for (const ToolCallFormat format : kFormats) {
        const ToolCallSyntax syntax = tool_call_syntax(format);
        for (int trial = 0; trial < 700; ++trial) {
            std::string answer =
                written(syntax, syntax.content_before_calls ? "Hi. " : "", random_calls(rng));
            for (int64_t edits = rng.integer(1, 4); edits > 0 && !answer.empty(); --edits) {
                const size_t at = size_t(rng.integer(0, int64_t(answer.size()) - 1));
                switch (rng.integer(0, 2)) {
                    case 0:
                        answer.erase(at, size_t(rng.integer(1, 8)));
                        break;
                    case 1:
                        answer.insert(
                            at, 1, alphabet[size_t(rng.integer(0, int64_t(alphabet.size()) - 1))]);
                        break;
                    default:
                        answer.resize(at);
                }
            }
            ToolCallParse parse;
            ASSERT_NO_THROW(parse = parse_tool_calls(format, answer))
                << shown(answer) << "\n  " << rng.trace();
            ++total;
            if (!parse.called) continue;
            ++still_called;
            ASSERT_FALSE(parse.calls.empty());
            for (const ParsedToolCall& call : parse.calls) {
                EXPECT_FALSE(call.name.empty()) << shown(answer);
                EXPECT_TRUE(Json::parse(call.arguments).is_object()) << shown(answer);
            }
        }
    }
    // Both outcomes were exercised.
    EXPECT_GT(still_called, 0u);
    EXPECT_LT(still_called, total);
}

TEST(ToolCallParser, DeepNestingIsContent) {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    for (const std::string& answer :
         {"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + deep + "}}</tool_call>",
          "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": " + std::string(1000, '[') +
              "\"}",
          "<tool_call>" + std::string(70, '{')}) {
        EXPECT_FALSE(parse_tool_calls(ToolCallFormat::kHermes, answer).called);
    }
    const std::string nested =
        std::string(kMaxCallDepth - 2, '[') + std::string(kMaxCallDepth - 2, ']');
    EXPECT_TRUE(
        parse_tool_calls(ToolCallFormat::kHermes,
                         "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": " + nested + "}}")
            .called);
}

TEST(ToolCallSyntax, DescribesEachFormat) {
    const ToolCallSyntax hermes = tool_call_syntax(ToolCallFormat::kHermes);
    EXPECT_EQ(hermes.call_begin, "<tool_call>\n");
    EXPECT_EQ(hermes.call_end, "\n</tool_call>");
    EXPECT_EQ(hermes.arguments_key, "arguments");
    EXPECT_TRUE(hermes.content_before_calls);
    const ToolCallSyntax llama = tool_call_syntax(ToolCallFormat::kLlama3Json);
    EXPECT_EQ(llama.arguments_key, "parameters");
    EXPECT_EQ(llama.call_separator, "; ");
    EXPECT_TRUE(llama.starts_at_beginning);
    const ToolCallSyntax mistral = tool_call_syntax(ToolCallFormat::kMistral);
    EXPECT_EQ(mistral.calls_begin, "[TOOL_CALLS][");
    EXPECT_EQ(mistral.calls_end, "]");
    EXPECT_EQ(mistral.control_markers, std::vector<std::string>{"[TOOL_CALLS]"});
    EXPECT_TRUE(tool_call_syntax(ToolCallFormat::kNone).call_markers.empty());
}

}  // namespace
}  // namespace servelab
