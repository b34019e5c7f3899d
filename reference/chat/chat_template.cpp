// chat_template.cpp — the chat template's variables, as apply_chat_template sets them.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// See chat_template.h.
#include "reference/chat/chat_template.h"

#include <fmt/format.h>

#include "reference/chat/jinja_eval.h"
#include "reference/chat/jinja_parser.h"

namespace servelab {

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> parsed)
    : parsed_(std::move(parsed)) {}

ChatTemplate ChatTemplate::parse(std::string_view source) {
    return ChatTemplate(std::make_shared<const jinja::Template>(jinja::parse_template(source)));
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
    using jinja::Value;
    jinja::List messages;
    for (const ChatMessage& message : inputs.messages) {
        messages.push_back(Value::dict(
            {{"role", Value::string(message.role)}, {"content", Value::string(message.content)}}));
    }
    // Hugging Face passes tools=None and documents=None when there are none,
    // so `tools is defined` is true and `tools is none` too.
    jinja::Dict globals = {
        {"messages", Value::list(std::move(messages))},
        {"add_generation_prompt", Value::boolean(inputs.add_generation_prompt)},
        {"bos_token", Value::string(inputs.bos_token)},
        {"eos_token", Value::string(inputs.eos_token)},
        {"tools", Value::none()},
        {"documents", Value::none()},
        {"raise_exception", Value::function("raise_exception")},
        {"namespace", Value::function("namespace")},
    };
    return jinja::render_template(*parsed_, std::move(globals));
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
