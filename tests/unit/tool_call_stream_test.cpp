// tool_call_stream_test.cpp — streamed and whole answers with tool calls agree.
//
// Part of the serving tests (chapter 11.7; tool calling). Checked:
//   - ToolCallStream: however an answer is cut into pieces, the content it
//     streams (pushes, then finish) is the whole answer's content
//     (parse_tool_calls on the joined text), and its calls are the whole
//     answer's; text that cannot begin a call is sent at once; a marker's
//     text is never sent as content when a call follows;
//   - control-token markers put back into a decoded answer, where their
//     token was (and not past a stop string's cut);
//   - the whole response rewritten as calls (content, ids, arguments text,
//     finish reason), and a call's streamed chunk, in OpenAI's shapes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "reference/model/gguf_reader.h"
#include "reference/model/tiny_model.h"
#include "reference/server/tool_call_response.h"
#include "reference/server/tool_call_stream.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using Json = nlohmann::ordered_json;

std::string shown(std::string_view text) {
    return nlohmann::json(std::string(text))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Answers of every kind for `format`: plain text (with pieces of markers),
// content then calls, calls alone, and broken calls.
std::string random_answer(ToolCallFormat format, test::RandomSource& rng) {
    static const std::vector<std::string> text = {"Hi", " ", "\n",    "<",      "<tool", "_call",
                                                  ">",  "[", "[TOOL", "_CALLS", "]",     "{",
                                                  "}",  "é", "\"",    "x"};
    const ToolCallSyntax syntax = tool_call_syntax(format);
    std::string answer;
    for (int64_t i = rng.integer(0, 6); i > 0; --i)
        answer += text[size_t(rng.integer(0, int64_t(text.size()) - 1))];
    if (rng.integer(0, 2) == 0) return answer;  // plain (or whatever the pieces spelled)
    if (!syntax.content_before_calls) answer = rng.integer(0, 1) ? "" : " ";
    answer += syntax.calls_begin;
    for (int64_t i = rng.integer(1, 3); i > 0; --i) {
        answer += syntax.call_begin + R"({"name": "f)" + std::to_string(i) + R"(", ")" +
                  syntax.arguments_key + R"(": {"q": "a<tool_call>[TOOL_CALLS]"}})" +
                  syntax.call_end;
        if (i > 1) answer += syntax.call_separator;
    }
    answer += syntax.calls_end;
    if (rng.integer(0, 3) == 0)
        answer.resize(size_t(rng.integer(0, int64_t(answer.size()))));  // cut short
    return answer;
}

TEST(ToolCallStream, StreamedContentAndCallsEqualTheWholeAnswers) {
    test::RandomSource rng;
    for (const ToolCallFormat format :
         {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
        for (int trial = 0; trial < 500; ++trial) {
            const std::string answer = random_answer(format, rng);
            const ToolCallParse whole = parse_tool_calls(format, answer);
            ToolCallStream stream(format, SIZE_MAX);
            std::string streamed;
            for (size_t at = 0; at < answer.size();) {
                const size_t length = size_t(rng.integer(1, 6));
                streamed += stream.push(std::string_view(answer).substr(at, length));
                at += length;
            }
            const ToolCallStream::End end = stream.finish();
            const std::string label = std::string(tool_call_format_name(format)) + " " +
                                      shown(answer) + "\n  " + rng.trace();
            EXPECT_EQ(streamed + end.content, whole.called ? whole.content : answer) << label;
            ASSERT_EQ(end.calls.size(), whole.calls.size()) << label;
            for (size_t i = 0; i < end.calls.size(); ++i) {
                EXPECT_EQ(end.calls[i].name, whole.calls[i].name) << label;
                EXPECT_EQ(end.calls[i].arguments, whole.calls[i].arguments) << label;
            }
            if (whole.called) {
                for (const std::string& marker : tool_call_syntax(format).call_markers) {
                    if (marker != "{") EXPECT_EQ(streamed.find(marker), std::string::npos) << label;
                }
            }
        }
    }
}

TEST(ToolCallStream, TextThatCannotBeginACallIsSentAtOnce) {
    ToolCallStream hermes(ToolCallFormat::kHermes, SIZE_MAX);
    EXPECT_EQ(hermes.push("Let me "), "Let me ");
    EXPECT_EQ(hermes.push("see <to"), "see ") << "\"<to\" may begin <tool_call>";
    EXPECT_EQ(hermes.push("day>"), "<today>") << "decided: not a marker";
    EXPECT_EQ(hermes.push("\n<tool_call>\n{\"name\""), "\n");
    EXPECT_EQ(hermes.push(": \"f\", \"arguments\": {}}\n</tool_call>"), "") << "held to the end";
    const ToolCallStream::End end = hermes.finish();
    EXPECT_EQ(end.content, "");
    ASSERT_EQ(end.calls.size(), 1u);
    EXPECT_EQ(end.calls[0].name, "f");

    ToolCallStream llama(ToolCallFormat::kLlama3Json, SIZE_MAX);
    EXPECT_EQ(llama.push("  "), "") << "space first: not decided yet";
    EXPECT_EQ(llama.push("The"), "  The");
    EXPECT_EQ(llama.push(" {x}"), " {x}") << "a call only begins the answer";
    ToolCallStream json_answer(ToolCallFormat::kLlama3Json, SIZE_MAX);
    EXPECT_EQ(json_answer.push("{\"answer\": 42}"), "");
    EXPECT_EQ(json_answer.finish().content, "{\"answer\": 42}")
        << "JSON that is no call is content";

    ToolCallStream mistral(ToolCallFormat::kMistral, 1);
    EXPECT_EQ(mistral.push("Ok.[TOOL_"), "Ok.");
    EXPECT_EQ(
        mistral.push(
            "CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {}}]"),
        "");
    EXPECT_EQ(mistral.finish().calls.size(), 1u) << "max_calls 1 (parallel_tool_calls false)";
}

Tokenizer tiny_tokenizer() {
    return Tokenizer::from_gguf(GgufFile::parse(make_tiny_model(TinyModelOptions{})));
}

TEST(ToolCallResponse, ControlMarkersArePutBackWhereTheirTokenWas) {
    const Tokenizer tokenizer = tiny_tokenizer();
    // The tiny vocabulary has no [TOOL_CALLS]; let its control token
    // <|im_start|> stand for one.
    EXPECT_TRUE(marker_tokens(ToolCallFormat::kMistral, tokenizer).empty());
    const TokenId marker = tokenizer.find_token("<|im_start|>");
    ASSERT_GE(marker, 0);
    const MarkerTokens markers = {{marker, "[TOOL_CALLS]"}};
    GenerationResult result;
    result.tokens = tokenizer.encode("Ok. ", false);
    result.tokens.push_back(marker);
    const std::vector<TokenId> calls =
        tokenizer.encode(R"([{"name": "f", "arguments": {}}])", false);
    result.tokens.insert(result.tokens.end(), calls.begin(), calls.end());
    result.text = tokenizer.decode(result.tokens);
    EXPECT_EQ(result.text, R"(Ok. [{"name": "f", "arguments": {}}])")
        << "decoding drops the control token";
    EXPECT_EQ(text_with_markers(result, tokenizer, markers),
              R"(Ok. [TOOL_CALLS][{"name": "f", "arguments": {}}])");
    result.text = "Ok";  // a stop string cut the text before the marker
    EXPECT_EQ(text_with_markers(result, tokenizer, markers), "Ok");
    EXPECT_EQ(text_with_marker(marker, "", markers), "[TOOL_CALLS]");
    EXPECT_EQ(text_with_marker(marker + 1, "", markers), "");
    EXPECT_EQ(text_with_markers(result, tokenizer, {}), "Ok");
}

bool is_id(const std::string& id, const std::string& prefix, size_t letters) {
    if (!id.starts_with(prefix) || id.size() != prefix.size() + letters) return false;
    return std::all_of(id.begin() + long(prefix.size()), id.end(),
                       [](char c) { return std::isalnum(c); });
}

TEST(ToolCallResponse, TheWholeResponseCarriesTheCalls) {
    const Tokenizer tokenizer = tiny_tokenizer();
    std::vector<GenerationResult> results(3);
    results[0].text =
        "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    results[1].text = "It is sunny.";
    results[2].text = "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>";
    nlohmann::json body = {{"choices", nlohmann::json::array()}};
    for (const GenerationResult& result : results) {
        body["choices"].push_back({{"message", {{"role", "assistant"}, {"content", result.text}}},
                                   {"finish_reason", "stop"}});
    }
    const nlohmann::json plain = body;
    ToolRequest tools;
    tools.functions = {{"get_weather", "", Json::object(), false},
                       {"now", "", Json::object(), false}};
    tools.format = ToolCallFormat::kHermes;
    tools.choice = ToolChoice::kNone;
    add_tool_calls(body, results, tools, tokenizer);
    EXPECT_EQ(body, plain) << "tool_choice \"none\": never read as calls";
    tools.choice = ToolChoice::kAuto;
    add_tool_calls(body, results, tools, tokenizer);
    const nlohmann::json& first = body["choices"][0];
    EXPECT_EQ(first["finish_reason"], "tool_calls");
    EXPECT_EQ(first["message"]["content"], "Checking.\n");
    ASSERT_EQ(first["message"]["tool_calls"].size(), 2u);
    const nlohmann::json& call = first["message"]["tool_calls"][0];
    EXPECT_TRUE(is_id(call["id"], "call_", 24)) << call["id"];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["function"]["name"], "get_weather");
    EXPECT_EQ(nlohmann::json::parse(call["function"]["arguments"].get<std::string>()),
              nlohmann::json({{"city", "Paris"}}))
        << "arguments are JSON text";
    EXPECT_NE(first["message"]["tool_calls"][1]["id"], call["id"]);
    EXPECT_EQ(body["choices"][1], plain["choices"][1]) << "an answer without calls is untouched";
    EXPECT_TRUE(body["choices"][2]["message"]["content"].is_null())
        << "no text before the call: null";
    // parallel_tool_calls false: one call.
    nlohmann::json single = plain;
    tools.parallel_tool_calls = false;
    add_tool_calls(single, results, tools, tokenizer);
    EXPECT_EQ(single["choices"][0]["message"]["tool_calls"].size(), 1u);
    // Mistral's templates want 9-letter ids.
    ToolCallIds mistral(ToolCallFormat::kMistral);
    EXPECT_TRUE(is_id(mistral.next(), "", 9));
}

TEST(ToolCallResponse, AStreamedCallIsOneDeltaWithIndexIdTypeNameAndArguments) {
    const ResponseHeader header{"chatcmpl-1", 7, "m", true};
    const nlohmann::json call = {{"id", "call_x"},
                                 {"type", "function"},
                                 {"function", {{"name", "f"}, {"arguments", "{\"a\":1}"}}}};
    const nlohmann::json chunk = tool_call_chunk(header, 2, 1, call, /*first=*/true);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    const nlohmann::json& choice = chunk["choices"][0];
    EXPECT_EQ(choice["index"], 2);
    EXPECT_TRUE(choice["finish_reason"].is_null());
    EXPECT_EQ(choice["delta"]["role"], "assistant");
    EXPECT_FALSE(choice["delta"].contains("content"));
    const nlohmann::json& delta = choice["delta"]["tool_calls"][0];
    EXPECT_EQ(delta["index"], 1);
    EXPECT_EQ(delta["id"], "call_x");
    EXPECT_EQ(delta["type"], "function");
    EXPECT_EQ(delta["function"]["name"], "f");
    EXPECT_EQ(delta["function"]["arguments"], "{\"a\":1}");
    EXPECT_FALSE(
        tool_call_chunk(header, 0, 0, call, false)["choices"][0]["delta"].contains("role"));
}

}  // namespace
}  // namespace servelab
