// chat_template.h — render a conversation with the model's own chat template.
//
// Support code, not an exercise: no lab touches it (chapter 11, serving: chat templates).
// A GGUF file carries its prompt format as a Jinja2 template
// (tokenizer.chat_template), written for Hugging Face's apply_chat_template.
// ChatTemplate runs it with a small interpreter for the subset of Jinja that
// chat templates use (jinja_lexer, jinja_parser, jinja_eval, jinja_builtins),
// with the variables and settings apply_chat_template gives it, so the prompt
// is the one the model was trained on, byte for byte: for SmolLM2, Llama 3.x,
// Qwen2.5, Mistral and DeepSeek-V2 tests/unit/chat_template_test.cpp checks
// it against Python's jinja2. docs/chat_templates.md lists the subset.
#pragma once

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

// What apply_chat_template passes a template. It also sees `tools` and
// `documents` as None, and the functions raise_exception(message) and
// namespace(...). (Not strftime_now: templates that test `is defined` fall
// back to their own default date.)
struct ChatTemplateInputs {
    std::span<const ChatMessage> messages;  // each a dict {"role": ..., "content": ...}
    bool add_generation_prompt = true;      // open an assistant turn at the end
    std::string bos_token, eos_token;       // the vocabulary's, as text ("" if none)
};

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
