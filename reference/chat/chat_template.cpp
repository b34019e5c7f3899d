// chat_template.cpp — the chat template's variables, as apply_chat_template sets them.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See chat_template.h.
#include "reference/chat/chat_template.h"

#include <fmt/format.h>

#include "reference/chat/jinja_eval.h"
#include "reference/chat/jinja_json.h"
#include "reference/chat/jinja_parser.h"

namespace servelab {
namespace {

// A tool call as templates read it: {"id", "type": "function", "function":
// {"name", "arguments"}}, the arguments parsed from their JSON text into an
// object, as vLLM and Hugging Face pass them ("" reads as {}).
jinja::Value tool_call_value(const ToolCall& call) {
    using jinja::Value;
    Value arguments = Value::dict({});
    if (!call.arguments.empty()) {
        const auto json = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
        if (json.is_discarded()) {
            throw Error(fmt::format("the arguments of tool call '{}' are not JSON", call.id));
        }
        arguments = jinja::from_json(json);
    }
    jinja::Dict function = {{"name", Value::string(call.name)},
                            {"arguments", std::move(arguments)}};
    if (!call.name_before_arguments) std::swap(function[0], function[1]);
    jinja::Dict fields = {{"id", Value::string(call.id)},
                          {"type", Value::string("function")},
                          {"function", Value::dict(std::move(function))}};
    if (!call.type_before_function) std::swap(fields[1], fields[2]);
    return Value::dict(std::move(fields));
}

jinja::Value message_value(const ChatMessage& message) {
    using jinja::Value;
    jinja::Dict fields = {
        {"role", Value::string(message.role)},
        {"content", message.content_is_null ? Value::none() : Value::string(message.content)}};
    if (message.tool_calls) {
        jinja::List calls;
        for (const ToolCall& call : *message.tool_calls) calls.push_back(tool_call_value(call));
        fields.emplace_back("tool_calls", Value::list(std::move(calls)));
    }
    if (message.tool_call_id)
        fields.emplace_back("tool_call_id", Value::string(*message.tool_call_id));
    if (message.name) fields.emplace_back("name", Value::string(*message.name));
    return Value::dict(std::move(fields));
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> parsed)
    : parsed_(std::move(parsed)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
    return ChatTemplate(std::make_shared<const jinja::Template>(jinja::parse_template(source)));
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
    using jinja::Value;
    check_template_variables(inputs.extra_variables);
    if (inputs.continue_final_message && inputs.add_generation_prompt) {
        throw Error("continue_final_message and add_generation_prompt cannot both be set");
    }
    jinja::List messages;
    for (const ChatMessage& message : inputs.messages) messages.push_back(message_value(message));
    // Hugging Face passes tools=None and documents=None when there are none,
    // so `tools is defined` is true and `tools is none` too.
    jinja::Dict globals = {
        {"messages", Value::list(std::move(messages))},
        {"add_generation_prompt", Value::boolean(inputs.add_generation_prompt)},
        {"bos_token", Value::string(inputs.bos_token)},
        {"eos_token", Value::string(inputs.eos_token)},
        {"tools", jinja::from_json(inputs.tools)},
        {"documents", Value::none()},
        {"raise_exception", Value::function("raise_exception")},
        {"namespace", Value::function("namespace")},
    };
    for (const auto& [name, value] : inputs.extra_variables.items()) {
        globals.emplace_back(name, jinja::from_json(value));
    }
    const std::string rendered = jinja::render_template(*parsed_, std::move(globals));
    if (!inputs.continue_final_message) return rendered;
    return cut_after_final_message(rendered, inputs.messages);
}

bool is_reserved_template_variable(std::string_view name) {
    for (const std::string_view reserved :
         {"messages", "add_generation_prompt", "bos_token", "eos_token", "tools", "documents",
          "raise_exception", "namespace", "continue_final_message"}) {
        if (name == reserved) return true;
    }
    return false;
}

void check_template_variables(const nlohmann::ordered_json& extra_variables) {
    if (!extra_variables.is_object()) {
        throw Error("the chat template's extra variables must be a JSON object");
    }
    for (const auto& [name, value] : extra_variables.items()) {
        if (is_reserved_template_variable(name)) {
            throw Error(fmt::format(
                "'{}' is a variable servelab sets for the chat template; it cannot be given "
                "as an extra one",
                name));
        }
    }
}

std::string cut_after_final_message(const std::string& rendered,
                                    std::span<const ChatMessage> messages) {
    if (messages.empty()) throw Error("continue_final_message needs a message to continue");
    const ChatMessage& last = messages.back();
    if (last.content_is_null)
        throw Error("continue_final_message: the last message has no content");
    // transformers' apply_chat_template, step by step (Python str methods on
    // UTF-8 bytes give the same cut: every comparison is of whole strings).
    const std::string_view final_text = last.content;
    const std::string_view stripped = jinja::strip_space(final_text, true, true);
    const size_t at = rendered.rfind(stripped);
    if (at == std::string::npos) {
        throw Error(
            "continue_final_message: the last message's text does not appear in the chat "
            "template's rendering");
    }
    const std::string_view left_stripped = jinja::strip_space(final_text, true, false);
    if (std::string_view(rendered).substr(at, left_stripped.size()) == final_text) {
        return rendered.substr(0, at + left_stripped.size());  // its trailing space kept
    }
    return rendered.substr(0, at + stripped.size());  // the template trimmed it
}

std::optional<ChatTemplate> load_chat_template(const GgufFile& file, std::string& why_not) {
    const std::string source = file.get_string("tokenizer.chat_template", "");
    if (source.empty()) {
        why_not = "the model has no chat template (tokenizer.chat_template)";
        return std::nullopt;
    }
    try {
        return ChatTemplate::parse(source);
    } catch (const Error& e) {
        why_not = fmt::format("the model's chat template cannot be rendered ({})", e.what());
        return std::nullopt;
    }
}

void set_special_tokens(ChatTemplateInputs& inputs, const Tokenizer& tokenizer) {
    inputs.bos_token = tokenizer.bos_id() >= 0 ? tokenizer.token_text(tokenizer.bos_id()) : "";
    inputs.eos_token = tokenizer.eos_id() >= 0 ? tokenizer.token_text(tokenizer.eos_id()) : "";
}

}  // namespace servelab
