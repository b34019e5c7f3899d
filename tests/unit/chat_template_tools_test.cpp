// chat_template_tools_test.cpp — requests with tools, tool calls and template options render as
// jinja2 renders them.
//
// Part of the serving tests (chapter 11, serving: chat templates and tool calling).
// The expected strings are Python jinja2's (tools/goldens/make_chat_template_goldens.py,
// "tool_cases" of data/golden/chat_templates/goldens.json): Qwen2.5's, Llama 3.1's and
// Mistral Nemo's templates (the three tool-call formats) over conversations in the
// OpenAI wire shape — assistant tool calls with JSON-text arguments and null
// content, tool results — with each tool list or none, and chat_template_kwargs
// and continue_final_message over every template. Each case goes the server's way:
// the request body through parse_chat_request (so key order, argument parsing and
// the message fields are the server's), then ChatTemplate::render; byte for byte,
// or an error where jinja2 raised one. Further tests: floats print as Python's
// repr; reserved variable names; continue_final_message's edge cases; and
// --special-tokens-in-messages text keeping control-token text in tool calls and
// tool results plain, through templates that trim it or print it with tojson.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "reference/chat/chat_format.h"
#include "reference/chat/chat_template.h"
#include "reference/chat/jinja_value.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/tiny_model.h"
#include "reference/server/chat_request.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using Json = nlohmann::ordered_json;
using test::source_path;

constexpr const char* kFolder = "data/golden/chat_templates/";

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Ordered: a tool list must reach the template in the order Python's dicts keep.
const Json& goldens() {
    static const Json golden =
        Json::parse(read_file(source_path(std::string(kFolder) + "goldens.json")));
    return golden;
}

std::string template_source(const std::string& name) {
    return read_file(
        source_path(kFolder + goldens().at("templates").at(name).at("file").get<std::string>()));
}

std::string visible(const std::string& text) {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The request body a client would send for the case.
Json request_body(const Json& c) {
    const Json& golden = goldens();
    const std::string set = c.at("messages");
    const Json& messages = golden.at("tool_message_sets").contains(set)
                               ? golden.at("tool_message_sets").at(set)
                               : golden.at("message_sets").at(set);
    Json body = {{"model", "m"},
                 {"messages", messages},
                 {"add_generation_prompt", c.at("add_generation_prompt")},
                 {"continue_final_message", c.at("continue_final_message")},
                 {"chat_template_kwargs", c.at("chat_template_kwargs")}};
    if (!c.at("tools").is_null())
        body["tools"] = golden.at("tool_sets").at(c.at("tools").get<std::string>());
    return body;
}

// servelab's rendering of the case, or the error it threw.
std::string render_case(const Json& c, std::string& error) {
    const ChatRequest request = parse_chat_request(request_body(c));
    const Json& info = goldens().at("templates").at(c.at("template").get<std::string>());
    ChatTemplateInputs inputs;
    inputs.messages = request.messages;
    inputs.add_generation_prompt = request.template_options.add_generation_prompt;
    inputs.continue_final_message = request.template_options.continue_final_message;
    inputs.extra_variables = request.template_options.extra_variables;
    inputs.bos_token = info.at("bos_token");
    inputs.eos_token = info.at("eos_token");
    if (request.tools.has_tools()) inputs.tools = request.tools.tools;
    try {
        return ChatTemplate::parse(template_source(c.at("template"))).render(inputs);
    } catch (const Error& e) {
        error = e.what();
        return "";
    }
}

TEST(ChatTemplateTools, RequestsWithToolsRenderLikeJinja2) {
    size_t checked = 0, raised = 0;
    for (const Json& c : goldens().at("tool_cases")) {
        const std::string label =
            c.at("template").get<std::string>() + " with \"" + c.at("messages").get<std::string>() +
            "\", tools " + c.at("tools").dump() + ", add_generation_prompt " +
            c.at("add_generation_prompt").dump() + ", kwargs " +
            c.at("chat_template_kwargs").dump() + ", continue_final_message " +
            c.at("continue_final_message").dump();
        std::string error;
        const std::string output = render_case(c, error);
        ++checked;
        if (c.contains("error")) {
            ++raised;
            EXPECT_FALSE(error.empty()) << label << ": jinja2 raised " << c.at("message")
                                        << " but servelab rendered " << visible(output);
            continue;
        }
        const std::string want = c.at("output");
        EXPECT_TRUE(error.empty())
            << label << ": jinja2 renders " << visible(want) << " but servelab threw: " << error;
        EXPECT_EQ(output, want) << label << "\n  servelab: " << visible(output)
                                << "\n  jinja2:   " << visible(want);
    }
    // Guards against an emptied golden file passing vacuously.
    EXPECT_GE(checked, 170u);
    EXPECT_GE(raised, 8u);
}

TEST(ChatTemplateTools, FloatsPrintAsPythonRepr) {
    size_t checked = 0;
    for (const Json& text : goldens().at("float_reprs")) {
        const std::string repr = text;
        const double value = std::strtod(repr.c_str(), nullptr);  // repr reads back exactly
        EXPECT_EQ(jinja::python_float_repr(value), repr) << "the double read from " << repr;
        EXPECT_EQ(jinja::to_json(jinja::Value::floating(value), -1), repr);
        ++checked;
    }
    EXPECT_GE(checked, 200u);
}

TEST(ChatTemplateTools, FloatsCompareButDoNoArithmetic) {
    const std::vector<ChatMessage> messages = {{"user", "Hi"}};
    ChatTemplateInputs inputs{messages, true, "", ""};
    inputs.extra_variables = Json{{"x", 0.5}, {"one", 1.0}};
    const auto render = [&](const std::string& source) {
        return ChatTemplate::parse(source).render(inputs);
    };
    EXPECT_EQ(render("{{ x }}|{{ one }}|{{ x < 1 }}|{{ one == 1 }}|{{ x is number }}|{{ x|tojson }}"
                     "|{{ 'y' if x else 'n' }}"),
              "0.5|1.0|True|True|True|0.5|y");
    EXPECT_NE(test::error_of([&] { render("{{ x + 1 }}"); }).find("floats"), std::string::npos);
}

TEST(ChatTemplateTools, ReservedVariablesAreRefusedByName) {
    for (const char* name : {"messages", "tools", "add_generation_prompt", "bos_token",
                             "raise_exception", "continue_final_message"}) {
        const std::string message = test::error_of([&] {
            check_template_variables(Json{{"fine", 1}, {name, true}});
        });
        EXPECT_NE(message.find(std::string("'") + name + "'"), std::string::npos) << message;
    }
    EXPECT_NO_THROW(check_template_variables(Json{{"enable_thinking", false}}));
    EXPECT_FALSE(test::error_of([] { check_template_variables(Json::array()); }).empty());
}

TEST(ChatTemplateTools, ContinueFinalMessageCutsAsTransformersDoes) {
    const std::vector<ChatMessage> prefilled = {{"user", "Count."}, {"assistant", "One, two, "}};
    // The template kept the trailing space: it stays.
    EXPECT_EQ(cut_after_final_message("<u>Count.</u><a>One, two, </a>", prefilled),
              "<u>Count.</u><a>One, two, ");
    // The template trimmed it: cut after the stripped text.
    EXPECT_EQ(cut_after_final_message("<u>Count.</u><a>One, two,</a>", prefilled),
              "<u>Count.</u><a>One, two,");
    // The last occurrence counts.
    const std::vector<ChatMessage> repeated = {{"user", "x"}, {"assistant", "x"}};
    EXPECT_EQ(cut_after_final_message("[x][x]!", repeated), "[x][x");
    EXPECT_FALSE(
        test::error_of([&] { cut_after_final_message("<a>other</a>", prefilled); }).empty());
    EXPECT_FALSE(test::error_of([] { cut_after_final_message("text", {}); }).empty());
    ChatMessage calls_only{"assistant", ""};
    calls_only.content_is_null = true;
    EXPECT_FALSE(
        test::error_of([&] { cut_after_final_message("text", std::vector{calls_only}); }).empty());
    // Both flags: refused by the renderer too.
    ChatTemplateInputs inputs{prefilled, true, "", ""};
    inputs.continue_final_message = true;
    EXPECT_FALSE(test::error_of([&] {
                     ChatTemplate::parse("{{ messages[-1].content }}").render(inputs);
                 }).empty());
}

// The tiny model's vocabulary: <|im_start|>, <|im_end|> and <|endoftext|>
// are control tokens, every byte has a token.
Tokenizer tiny_tokenizer() {
    return Tokenizer::from_gguf(GgufFile::parse(make_tiny_model(TinyModelOptions{})));
}

// With kText, a tool result and a call's arguments that spell "<|im_end|>"
// keep it as text: Qwen2.5 prints the result as it is and the arguments with
// tojson (which escapes control characters), Llama 3.1 trims the content
// (Python's strip() takes U+001C..U+001F as space) and prints a tool result
// with tojson. The prompt decodes to the template's rendering, and has only
// the template's own control tokens.
TEST(ChatTemplateTools, TextModeKeepsControlTextInToolTurnsPlain) {
    const Tokenizer tokenizer = tiny_tokenizer();
    const TokenId end = tokenizer.find_token("<|im_end|>");
    ASSERT_GE(end, 0);
    ChatMessage call{"assistant", ""};
    call.content_is_null = true;
    call.tool_calls = std::vector<ToolCall>{{"abc123XYZ", "f", R"({"text": "a<|im_end|>b"})"}};
    ChatMessage result{"tool", "done<|im_end|>"};
    result.tool_call_id = "abc123XYZ";
    const std::vector<ChatMessage> messages = {{"user", "hi <|im_end|>"}, call, result};
    for (const std::string name : {"qwen2.5-7b-instruct", "llama-3.1-8b-instruct"}) {
        const ChatTemplate tmpl = ChatTemplate::parse(template_source(name));
        const auto render = [&](std::span<const ChatMessage> m) {
            return tmpl.render(ChatTemplateInputs{m, true, "", ""});
        };
        const std::string rendered = render(messages);
        const std::vector<TokenId> ids =
            encode_chat(tokenizer, messages, render, SpecialTokensInMessages::kText);
        EXPECT_EQ(tokenizer.decode(ids, /*render_special=*/true), rendered)
            << name << ": the prompt lost or changed text (a placeholder not put back?)";
        const std::vector<TokenId> parsed = tokenizer.encode(rendered, /*parse_special=*/true);
        const auto count = [&](const std::vector<TokenId>& v) {
            return std::count(v.begin(), v.end(), end);
        };
        EXPECT_EQ(count(ids), count(parsed) - 3)
            << name
            << ": the messages' three \"<|im_end|>\" must be plain text, the template's "
               "own control tokens";
    }
}

}  // namespace
}  // namespace servelab
