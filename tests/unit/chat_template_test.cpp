// chat_template_test.cpp — servelab renders chat templates exactly as jinja2 does.
//
// Part of the model loader tests (all labs; chapter 11, serving: chat
// templates). The expected strings come from Python's jinja2, run by
// tools/goldens/make_chat_template_goldens.py in Hugging Face's apply_chat_template
// environment (data/golden/chat_templates/goldens.json): the real templates
// of SmolLM2, Llama 3 and 3.1, Qwen2.5, Mistral and DeepSeek-V2 against many
// conversations, and one small template per construct of the subset. Every
// output must match byte for byte, and where jinja2 raises, servelab must
// throw (at load time when jinja2 fails to compile). Further tests pin down
// what lies outside the subset, the limits that keep a hostile template from
// running away, and, by mutating the real templates at random, that a broken
// template only ever gives a servelab::Error.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "reference/chat/chat_format.h"
#include "reference/chat/chat_template.h"
#include "reference/model/gguf_reader.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using nlohmann::json;
using test::source_path;

constexpr const char* kFolder = "data/golden/chat_templates/";

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const json& goldens() {
    static const json golden =
        json::parse(read_file(source_path(std::string(kFolder) + "goldens.json")));
    return golden;
}

// A string as a JSON literal, so that newlines, tabs and trailing spaces show.
std::string visible(const std::string& text) {
    return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<ChatMessage> messages_of(const json& list) {
    std::vector<ChatMessage> messages;
    for (const json& m : list) messages.push_back({m.at("role"), m.at("content")});
    return messages;
}

std::string template_source(const std::string& name) {
    return read_file(
        source_path(kFolder + goldens().at("templates").at(name).at("file").get<std::string>()));
}

// No BOS or EOS text, a generation prompt.
ChatTemplateInputs plain(const std::vector<ChatMessage>& messages) {
    return {messages, true, "", ""};
}

// Checks one golden expectation: jinja2's output, or the error it raised.
// `label` names the case in any failure.
void expect_like_jinja2(const std::string& label, const std::string& source,
                        const ChatTemplateInputs& inputs, const json& expected) {
    std::string parse_error, render_error, output;
    try {
        const ChatTemplate tmpl = ChatTemplate::parse(source);
        try {
            output = tmpl.render(inputs);
        } catch (const Error& error) {
            render_error = error.what();
        }
    } catch (const Error& error) {
        parse_error = error.what();
    }
    if (expected.contains("output")) {
        const std::string want = expected.at("output");
        EXPECT_TRUE(parse_error.empty() && render_error.empty())
            << label << ": jinja2 renders " << visible(want)
            << " but servelab threw: " << parse_error << render_error;
        EXPECT_EQ(output, want) << label << "\n  servelab: " << visible(output)
                                << "\n  jinja2:   " << visible(want);
        return;
    }
    const std::string kind = expected.at("error"), message = expected.at("message");
    if (expected.at("stage") == "parse") {
        EXPECT_FALSE(parse_error.empty())
            << label << ": jinja2 refuses to compile it (" << kind << ": " << message
            << ") but servelab parsed it"
            << (render_error.empty() ? " and rendered " + visible(output) : "");
        return;
    }
    EXPECT_TRUE(parse_error.empty())
        << label << ": jinja2 compiles it but servelab did not: " << parse_error;
    EXPECT_FALSE(render_error.empty()) << label << ": jinja2 raises " << kind << ": " << message
                                       << " but servelab rendered " << visible(output);
    // raise_exception() is the template speaking: its message must come through as written.
    if (kind == "TemplateError" && !render_error.empty()) {
        EXPECT_EQ(render_error, "chat template raised an exception: " + message) << label;
    }
}

TEST(ChatTemplate, RealTemplatesRenderLikeJinja2) {
    const json& golden = goldens();
    size_t checked = 0;
    for (const json& c : golden.at("cases")) {
        const std::string name = c.at("template"), set = c.at("messages");
        const json& info = golden.at("templates").at(name);
        const std::vector<ChatMessage> messages = messages_of(golden.at("message_sets").at(set));
        ChatTemplateInputs inputs{messages, c.at("add_generation_prompt"), info.at("bos_token"),
                                  info.at("eos_token")};
        const std::string label = name + " with \"" + set + "\", add_generation_prompt=" +
                                  (inputs.add_generation_prompt ? "true" : "false");
        expect_like_jinja2(label, template_source(name), inputs, c);
        ++checked;
    }
    // Guards against an emptied golden file passing vacuously.
    EXPECT_GE(checked, 190u);
    EXPECT_GE(golden.at("templates").size(), 7u);
}

TEST(ChatTemplate, EveryConstructOfTheSubsetRendersLikeJinja2) {
    const json& golden = goldens();
    const std::vector<ChatMessage> messages =
        messages_of(golden.at("message_sets").at(golden.at("feature_messages").get<std::string>()));
    ChatTemplateInputs inputs{messages, true, golden.at("feature_bos_token"),
                              golden.at("feature_eos_token")};
    size_t checked = 0;
    for (const json& feature : golden.at("features")) {
        const std::string source = feature.at("source");
        expect_like_jinja2(
            "feature \"" + feature.at("name").get<std::string>() + "\": " + visible(source), source,
            inputs, feature);
        ++checked;
    }
    EXPECT_GE(checked, 80u);
}

// The committed SmolLM2 template is the one in the model file, and for a
// conversation that starts with a system message it produces exactly the
// ChatML that format_chatml hard-codes; without one, it adds the default
// system prompt that callers of format_chatml add themselves.
TEST(ChatTemplate, SmolLm2TemplateIsTheGgufsAndAgreesWithFormatChatml) {
    if (!std::filesystem::exists(source_path(test::kSmolLm2Path))) {
        GTEST_SKIP() << test::kSmolLm2Path << " is missing; `make test` downloads it";
    }
    const GgufFile model = GgufFile::open(source_path(test::kSmolLm2Path));
    const std::string source = model.get_string("tokenizer.chat_template");
    ASSERT_EQ(source, template_source("smollm2-135m-instruct"));
    const ChatTemplate tmpl = ChatTemplate::parse(source);
    const std::vector<ChatMessage> with_system = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
    const std::vector<ChatMessage> without_system(with_system.begin() + 1, with_system.end());
    std::vector<ChatMessage> defaulted = without_system;
    defaulted.insert(defaulted.begin(), {"system", std::string(kSmolLmDefaultSystemPrompt)});
    for (const bool add_generation_prompt : {true, false}) {
        EXPECT_EQ(tmpl.render({with_system, add_generation_prompt, "<|im_start|>", "<|im_end|>"}),
                  format_chatml(with_system, add_generation_prompt));
        EXPECT_EQ(
            tmpl.render({without_system, add_generation_prompt, "<|im_start|>", "<|im_end|>"}),
            format_chatml(defaulted, add_generation_prompt));
    }
}

// jinja2 accepts all of these; servelab refuses them when the template is
// loaded, with a message that names the construct.
TEST(ChatTemplate, ConstructsOutsideTheSubsetAreRefusedByName) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{% macro m() %}x{% endmacro %}", "{% macro %} is not supported"},
        {"{% raw %}{{ x }}{% endraw %}", "{% raw %} blocks are not supported"},
        {"{% include 'other.jinja' %}", "{% include %} is not supported"},
        {"{% extends 'base.jinja' %}", "{% extends %} is not supported"},
        {"{% call m() %}x{% endcall %}", "{% call %} is not supported"},
        {"{% filter upper %}x{% endfilter %}", "{% filter %} is not supported"},
        {"{% with a = 1 %}{{ a }}{% endwith %}", "{% with %} is not supported"},
        {"{% generation %}x{% endgeneration %}", "{% generation %} is not supported"},
        {"{% set x %}block{% endset %}", "{% set %} ... {% endset %} blocks are not supported"},
        {"{% for m in messages %}x{% else %}y{% endfor %}",
         "{% for %} ... {% else %} is not supported"},
        {"{% for m in messages recursive %}{% endfor %}", "recursive loops are not supported"},
        {"{{ 1.5 }}", "float literals are not supported"},
        {"{{ 1e3 }}", "float literals are not supported"},
        {"{{ 0x1f }}", "integer literals other than plain decimal are not supported"},
        {"{{ 99999999999999999999 }}", "integer literal does not fit in 64 bits"},
        {"{{ 4 / 2 }}", "division is not supported"},
        {"{{ 4 // 2 }}", "division is not supported"},
        {"{{ 2 ** 3 }}", "the ** operator is not supported"},
        {"{{ (1, 2) }}", "tuples are not supported"},
        {"{% set a = 1, 2 %}", "tuples are not supported"},
        {"{{ 'a b'|wordcount }}", "filter 'wordcount' is not supported"},
        {"{{ 'a' is lower }}", "test 'lower' is not supported"},
        {"{{ '{}'.format(1) }}", "method .format() is not supported"},
        {"{% for i in range(3) %}{% endfor %}", "function range() is not supported"},
        {"{{ f(*args) }}", "*args and **kwargs are not supported"},
        {"{{ messages[0](1) }}", "only functions and methods can be called"},
        {"{{ '\\N{EM DASH}' }}", "\\N{...} escapes are not supported"},
    };
    for (const auto& [source, expected] : cases) {
        // A named copy for the lambda: clang 14 (the TSan build) cannot capture
        // a structured binding.
        const std::string template_source = source;
        const std::string message = test::error_of([&] { ChatTemplate::parse(template_source); });
        EXPECT_NE(message.find(expected), std::string::npos)
            << visible(source) << " gave \"" << message << "\", expected it to say \"" << expected
            << "\"";
    }
}

// Where servelab cannot reproduce Python byte for byte it throws at render
// time rather than print something else.
TEST(ChatTemplate, ValuesWithoutAnExactRenderingThrow) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{{ messages }}", "printing a list is not supported"},
        {"{{ messages[0] }}", "printing a dict is not supported"},
        {"{{ 'x' ~ [1] }}", "printing a list is not supported"},
        {"{{ messages|selectattr('role') }}", "printing a generator is not supported"},
        {"{{ 'Élan'|lower }}", "upper/lower of non-ASCII text is not supported"},
        {"{{ '%s' % 1 }}", "string formatting with % is not supported"},
        {"{{ {1: 2}|length }}", "dict keys other than str are not supported"},
        {"{{ messages|tojson(sort_keys=true) }}", "tojson(sort_keys=True) is not supported"},
    };
    const std::vector<ChatMessage> messages = {{"user", "Hi"}};
    for (const auto& [source, expected] : cases) {
        const ChatTemplate tmpl = ChatTemplate::parse(source);
        const std::string message = test::error_of([&] { tmpl.render(plain(messages)); });
        EXPECT_NE(message.find(expected), std::string::npos)
            << visible(source) << " gave \"" << message << "\", expected it to say \"" << expected
            << "\"";
    }
}

TEST(ChatTemplate, ErrorsNameLineAndColumn) {
    const std::vector<ChatMessage> messages = {{"user", "Hi"}};
    const ChatTemplate runtime =
        ChatTemplate::parse("line one\n{% if true %}\n  {{ nothing + 1 }}\n{% endif %}");
    EXPECT_EQ(test::error_of([&] { runtime.render(plain(messages)); }),
              "chat template, line 3, column 14: 'nothing' is undefined");
    EXPECT_EQ(test::error_of([&] { ChatTemplate::parse("ok\r\n\r\n  {{ 'a' | nope }}"); }),
              "chat template, line 3, column 12: filter 'nope' is not supported");
    EXPECT_EQ(test::error_of([&] { ChatTemplate::parse("{% for m in messages %}\n{{ m }}"); }),
              "chat template, line 2, column 8: missing {% endfor %}");
}

// Each limit stops a runaway template with an Error, quickly.
TEST(ChatTemplate, LimitsStopRunawayTemplates) {
    const std::vector<ChatMessage> messages = {{"user", "Hi"}};
    const auto render_error = [&](const std::string& source) {
        return test::error_of([&] { ChatTemplate::parse(source).render(plain(messages)); });
    };
    const auto parse_error = [&](const std::string& source) {
        return test::error_of([&] { ChatTemplate::parse(source); });
    };
    const auto repeat = [](const std::string& piece, int n) {
        std::string out;
        for (int i = 0; i < n; ++i) out += piece;
        return out;
    };
    EXPECT_NE(render_error("{{ 'x' * 100000000 }}").find("over the size limit"), std::string::npos);
    EXPECT_NE(render_error("{% for i in 'x' * 100 %}{{ 'y' * 30000000 }}{% endfor %}")
                  .find("the output is over"),
              std::string::npos);
    // A million cheap iterations of 60 additions each: the step budget runs out first.
    EXPECT_NE(render_error("{% for a in 'x' * 1000 %}{% for b in 'x' * 1000 %}{% if 1" +
                           repeat(" + 1", 60) + " %}{% endif %}{% endfor %}{% endfor %}")
                  .find("steps"),
              std::string::npos);
    // Big loops run out of bytes: each iteration builds its loop variables.
    EXPECT_NE(render_error(
                  "{% for a in 'x' * 100000 %}{% for b in 'x' * 100000 %}{% endfor %}{% endfor %}")
                  .find("bytes"),
              std::string::npos);
    EXPECT_NE(render_error("{% set ns = namespace(x=[]) %}{% for i in 'x' * 40 %}{% set ns.x = "
                           "ns.x + ns.x + [1] %}"
                           "{% endfor %}")
                  .find("bytes"),
              std::string::npos);
    EXPECT_NE(render_error("{% set ns = namespace(x=1) %}{% for i in 'x' * 100 %}{% set ns.x = "
                           "[ns.x] %}{% endfor %}")
                  .find("nest more than"),
              std::string::npos);
    EXPECT_NE(
        render_error("{% set ns = namespace() %}{% set ns.me = [ns] %}").find("in a namespace"),
        std::string::npos);
    EXPECT_NE(render_error("{{ namespace(me=namespace()) }}").find("in a namespace"),
              std::string::npos);
    // Parser recursion and tree height, by each way a tree grows.
    for (const std::string& source :
         {"{{ " + repeat("(", 5000) + "1" + repeat(")", 5000) + " }}",
          "{{ " + repeat("not ", 5000) + "1 }}", "{{ " + repeat("-", 5000) + "1 }}",
          "{{ 1" + repeat(" + 1", 5000) + " }}", "{{ x" + repeat(".a", 5000) + " }}",
          "{{ x" + repeat("|trim", 5000) + " }}",
          "{{ " + repeat("[", 5000) + repeat("]", 5000) + " }}",
          repeat("{% if 1 %}", 5000) + repeat("{% endif %}", 5000)}) {
        EXPECT_NE(parse_error(source).find("nests too deeply"), std::string::npos)
            << source.substr(0, 40);
    }
}

TEST(ChatTemplate, RendersTheSameOnManyThreadsAtOnce) {
    const ChatTemplate tmpl = ChatTemplate::parse(template_source("llama-3.1-8b-instruct"));
    const std::vector<ChatMessage> messages =
        messages_of(goldens().at("message_sets").at("multi_turn"));
    const ChatTemplateInputs inputs{messages, true, "<|begin_of_text|>", "<|eot_id|>"};
    const std::string expected = tmpl.render(inputs);
    std::vector<std::string> outputs(4);
    std::vector<std::thread> threads;
    for (std::string& output : outputs) {
        threads.emplace_back([&] {
            for (int i = 0; i < 50; ++i) output = tmpl.render(inputs);
        });
    }
    for (std::thread& thread : threads) thread.join();
    for (const std::string& output : outputs) EXPECT_EQ(output, expected);
}

// Pieces that tend to break a template in interesting ways when spliced in.
const std::vector<std::string>& fuzz_fragments() {
    static const std::vector<std::string> fragments = {
        "{%",
        "%}",
        "{{",
        "}}",
        "{#",
        "#}",
        "-",
        "+",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "'",
        "\"",
        "\\",
        "|",
        ".",
        ",",
        ":",
        "=",
        "*",
        "%",
        "~",
        "\n",
        "\r\n",
        "\t",
        " if ",
        " else ",
        " in ",
        " not ",
        " is ",
        " and ",
        " or ",
        "endif",
        "endfor",
        "elif",
        "loop",
        "ns",
        "none",
        "0",
        "-1",
        "99999999999999",
        "9223372036854775807",
        "\\u12",
        "\\x4",
        "[::-1]",
        "[1:]",
        "[-1]",
        "|tojson(indent=4)",
        "|selectattr('role')",
        "|length",
        "|trim",
        "|items",
        ".strip()",
        ".split()",
        "namespace(a=1)",
        "raise_exception('boom')",
        "'x' * 1000000",
        "{% set ns = namespace(x=[1]) %}",
        "{% set ns.x = ns.x + ns.x %}",
        "{% for a in messages %}{% for b in messages %}",
        "{% endfor %}{% endfor %}",
        "{% for c in 'abcdefghijklmnop' * 1000 %}",
        "{% break %}",
        "{% continue %}"};
    return fragments;
}

// One random edit: cut the tail, delete or duplicate a span, splice in a
// fragment, or overwrite a byte. Appends what it did to `trace`.
std::string mutate(std::string text, test::RandomSource& random, std::string& trace) {
    const auto position = [&] { return size_t(random.integer(0, int64_t(text.size()))); };
    const size_t at = position();
    switch (random.integer(0, 4)) {
        case 0:
            trace += " cut@" + std::to_string(at);
            return text.substr(0, at);
        case 1: {
            const size_t n = size_t(random.integer(1, 16));
            trace += " delete@" + std::to_string(at);
            return text.erase(at, n);
        }
        case 2: {
            const std::string& piece =
                fuzz_fragments()[size_t(random.integer(0, int64_t(fuzz_fragments().size()) - 1))];
            trace += " insert@" + std::to_string(at) + ":" + visible(piece);
            return text.insert(at, piece);
        }
        case 3: {
            const std::string span = text.substr(at, size_t(random.integer(1, 64)));
            const size_t to = position();
            trace += " copy@" + std::to_string(at) + "->" + std::to_string(to);
            return text.insert(std::min(to, text.size()), span);
        }
        default: {
            if (text.empty()) return text;
            const size_t i = std::min(at, text.size() - 1);
            text[i] = char(random.integer(0, 255));
            trace += " byte@" + std::to_string(i);
            return text;
        }
    }
}

// Broken templates (and broken UTF-8) give servelab::Error or an output,
// never a crash, a hang or another exception. Run under the sanitizers too.
TEST(ChatTemplate, MutatedTemplatesOnlyEverThrowError) {
    test::RandomSource random(1101);
    SCOPED_TRACE(random.trace());
    const json& golden = goldens();
    std::vector<std::string> sources;
    for (const auto& [name, info] : golden.at("templates").items())
        sources.push_back(template_source(name));
    for (const json& feature : golden.at("features")) sources.push_back(feature.at("source"));
    const std::vector<ChatMessage> conversation =
        messages_of(golden.at("message_sets").at("multi_turn"));
    const std::vector<ChatMessage> unicode = messages_of(golden.at("message_sets").at("unicode"));
    int parsed = 0, rendered = 0;
    constexpr int kMutants = 4000;
    for (int i = 0; i < kMutants; ++i) {
        std::string trace = "source " + std::to_string(i % sources.size()) + ":";
        std::string source = sources[size_t(i) % sources.size()];
        for (int edits = int(random.integer(1, 4)); edits > 0; --edits)
            source = mutate(source, random, trace);
        try {
            const ChatTemplate tmpl = ChatTemplate::parse(source);
            ++parsed;
            for (const auto* messages : {&conversation, &unicode}) {
                try {
                    tmpl.render({*messages, i % 2 == 0, "<s>", "</s>"});
                    ++rendered;
                } catch (const Error&) {
                }
            }
        } catch (const Error&) {
        } catch (const std::exception& other) {
            ADD_FAILURE() << "mutant " << i << " (" << trace << ") threw " << other.what()
                          << ", not a servelab::Error:\n"
                          << visible(source);
        }
    }
    // The mutants must exercise the renderer, not just the parser's errors.
    EXPECT_GT(parsed, kMutants / 10);
    EXPECT_GT(rendered, kMutants / 20);
    std::cout << "[ mutants  ] " << kMutants << " mutants: " << parsed << " parsed, " << rendered
              << " renders succeeded\n";
}

}  // namespace
}  // namespace servelab
