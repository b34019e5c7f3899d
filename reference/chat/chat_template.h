// chat_template.h — render a conversation with the model's own chat template.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// A GGUF file carries its prompt format as a Jinja2 template
// (tokenizer.chat_template), written for Hugging Face's apply_chat_template.
// ChatTemplate runs it with a small interpreter for the subset of Jinja that
// chat templates use (jinja_lexer, jinja_parser, jinja_eval, jinja_builtins),
// with the variables and settings apply_chat_template gives it (tools and
// tool calls included), so the prompt
// is the one the model was trained on, byte for byte: for SmolLM2, Llama 3.x,
// Qwen2.5, Mistral and DeepSeek-V2 tests/unit/chat_template_test.cpp checks
// it against Python's jinja2. docs/chat_templates.md lists the subset.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kernels/common/error.h"
#include "reference/chat/chat_format.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/tokenizer.h"

namespace servelab {

namespace jinja {
struct Template;
}

// How a request asks for its conversation to be rendered: the options of
// Hugging Face's apply_chat_template that OpenAI-compatible servers (vLLM)
// take as request fields.
struct ChatTemplateOptions {
    // Open an assistant turn after the messages (the model answers).
    bool add_generation_prompt = true;
    // Leave the last message open instead, so the model continues it (a
    // prefilled answer): the rendering is cut right after that message's
    // text, as apply_chat_template(continue_final_message=True) cuts it.
    // Never together with add_generation_prompt.
    bool continue_final_message = false;
    // More variables for the template (chat_template_kwargs), a JSON object:
    // {"enable_thinking": false}, {"date_string": "1 Jan 2025"}. None may
    // be named as one of the variables below (check_template_variables).
    nlohmann::ordered_json extra_variables = nlohmann::ordered_json::object();
};

// What apply_chat_template passes a template: messages, add_generation_prompt,
// bos_token, eos_token, tools (None when the request has none) and documents
// (always None), the functions raise_exception(message) and namespace(...),
// and the extra variables. (Not strftime_now: templates that test
// `is defined` fall back to their own default date.)
struct ChatTemplateInputs {
    std::span<const ChatMessage> messages;  // each a dict (ChatMessage says which keys)
    bool add_generation_prompt = true;      // open an assistant turn at the end
    std::string bos_token, eos_token;       // the vocabulary's, as text ("" if none)
    // The request's tools as it wrote them, a list of {"type": "function",
    // "function": {"name", "description", "parameters"}}; null: None.
    nlohmann::ordered_json tools = nullptr;
    bool continue_final_message = false;  // see ChatTemplateOptions
    nlohmann::ordered_json extra_variables = nlohmann::ordered_json::object();
};

// The variable names servelab gives every template; an extra variable may
// not take one of them (nor "continue_final_message", a request option).
bool is_reserved_template_variable(std::string_view name);
// Throws servelab::Error naming the first key of `extra_variables` that is
// reserved, or saying that it is not a JSON object.
void check_template_variables(const nlohmann::ordered_json& extra_variables);

// apply_chat_template's continue_final_message: `rendered` cut right after
// the text of the last message, so that the model continues it. The text is
// found as Hugging Face finds it (its last occurrence, stripped of
// whitespace; kept whole where the template kept its trailing whitespace).
// Throws servelab::Error when there is no message, the last has no content,
// or the template did not write its text.
std::string cut_after_final_message(const std::string& rendered,
                                    std::span<const ChatMessage> messages);

class ChatTemplate {
  public:
    // Parses a Jinja2 chat template. Throws servelab::Error, one line naming
    // the construct and its line and column, for a syntax error or anything
    // outside the supported subset (a macro, a float, an unknown filter...).
    static ChatTemplate parse(std::string_view source);

    // Renders the conversation. Throws servelab::Error for runtime failures
    // (a type error, an undefined value used in arithmetic, running over the
    // time or size budget) naming the line and column, and for the template's
    // own raise_exception('...'): "chat template raised an exception: ...".
    // Immutable after parse, so one ChatTemplate may render on many threads.
    std::string render(const ChatTemplateInputs& inputs) const;

  private:
    explicit ChatTemplate(std::shared_ptr<const jinja::Template> parsed);
    std::shared_ptr<const jinja::Template> parsed_;
};

// The model's own template (tokenizer.chat_template in the GGUF header),
// parsed. Empty, with `why_not` saying why in one line, when the model has
// none or it is outside the supported subset: the caller falls back to
// ChatML (RequestBuilder), or says so (`servelab info`).
std::optional<ChatTemplate> load_chat_template(const GgufFile& file, std::string& why_not);

// The special tokens apply_chat_template passes a template (bos_token,
// eos_token), as this vocabulary spells them.
void set_special_tokens(ChatTemplateInputs& inputs, const Tokenizer& tokenizer);

}  // namespace servelab
