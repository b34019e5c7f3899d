// request_builder.cpp — see request_builder.h.
#include "reference/engine/request_builder.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "reference/chat/tool_call_grammar.h"
#include "reference/chat/tools_in_prompt.h"
#include "reference/constrained/json_schema_grammar.h"

namespace servelab {

RequestBuilder::RequestBuilder(const Model& model, RequestBuilderOptions options)
    : model_(model),
      options_(options),
      context_length_(capped_context_length(model.config, options.max_model_len)) {
    chat_template_ = load_chat_template(model.file, fallback_reason_);
    if (chat_template_) {
        tool_call_format_ =
            detect_tool_call_format(model.file.get_string("tokenizer.chat_template", ""));
    }
    // A template with no place for tools: they go into the system message,
    // and calls are written (and read) in the Hermes format (tools_in_prompt.h).
    if (tool_call_format_ == ToolCallFormat::kNone) {
        tools_in_prompt_ = true;
        tool_call_format_ = ToolCallFormat::kHermes;
    }
}

std::string RequestBuilder::render_chat(std::span<const ChatMessage> messages,
                                        const ChatTemplateOptions& options,
                                        const ToolRequest& tools) const {
    if (tools_in_prompt_ && (tools.has_tools() || has_tool_turns(messages))) {
        const std::vector<ChatMessage> plain = with_tools_in_prompt(messages, tools.tools);
        return render_chat(plain, options, {});
    }
    try {
        if (!chat_template_) {
            // Said once, and only to a front end that renders a conversation.
            std::call_once(fallback_warned_, [this] {
                spdlog::warn("{}: chat prompts use ChatML", fallback_reason_);
            });
            const std::string chatml = format_chatml(messages, options.add_generation_prompt);
            return options.continue_final_message ? cut_after_final_message(chatml, messages)
                                                  : chatml;
        }
        ChatTemplateInputs inputs;
        inputs.messages = messages;
        inputs.add_generation_prompt = options.add_generation_prompt;
        inputs.continue_final_message = options.continue_final_message;
        inputs.extra_variables = options.extra_variables;
        if (tools.has_tools()) inputs.tools = tools.tools;
        set_special_tokens(inputs, model_.tokenizer);
        return chat_template_->render(inputs);
    } catch (const Error& e) {
        throw RequestError(e.what(), "messages");
    }
}

std::vector<TokenId> RequestBuilder::prompt_of(const RequestSpec& spec) const {
    const Tokenizer& tokenizer = model_.tokenizer;
    std::vector<TokenId> ids;
    switch (spec.kind) {
        case RequestSpec::PromptKind::kTokenIds:
            ids = spec.token_ids;
            break;
        case RequestSpec::PromptKind::kText:
            ids = tokenizer.encode(spec.text, /*parse_special=*/false);
            break;
        case RequestSpec::PromptKind::kChat:
            ids = encode_chat(
                tokenizer, spec.messages,
                [&](std::span<const ChatMessage> messages) {
                    return render_chat(messages, spec.template_options, spec.tools);
                },
                options_.special_tokens);
            break;
    }
    // Token ids are the caller's exact prompt; text gets the model's BOS,
    // unless it is there already (a chat template may write it).
    const TokenId bos = tokenizer.bos_id();
    const bool wants_bos =
        spec.kind != RequestSpec::PromptKind::kTokenIds && tokenizer.add_bos() && bos >= 0;
    if (wants_bos && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
    return ids;
}

EngineRequest RequestBuilder::build(const RequestSpec& spec) const {
    EngineRequest request;
    request.tools = spec.tools;
    request.tools.format = tool_call_format_;
    request.prompt = prompt_of(spec);
    const int64_t context = context_length_;
    const int64_t prompt_tokens = int64_t(request.prompt.size());
    const char* prompt_param = spec.kind == RequestSpec::PromptKind::kChat ? "messages" : "prompt";
    if (prompt_tokens == 0 || prompt_tokens >= context) {
        throw RequestError(
            fmt::format("the prompt is {} tokens; it must be 1 to {}", prompt_tokens, context - 1),
            prompt_param, "context_length_exceeded");
    }
    for (const TokenId id : request.prompt) {
        if (id < 0 || id >= model_.config.vocab_size) {
            throw RequestError(fmt::format("prompt token id {} is outside the vocabulary (0 to {})",
                                           id, model_.config.vocab_size - 1),
                               prompt_param);
        }
    }
    const int64_t room = context - prompt_tokens;
    request.params = spec.params;
    if (spec.max_tokens_given && request.params.max_tokens > room) {
        throw RequestError(fmt::format("{} prompt tokens + max_tokens {} exceed the context of {}",
                                       prompt_tokens, request.params.max_tokens, context),
                           "max_tokens", "context_length_exceeded");
    }
    request.params.max_tokens = int32_t(std::min<int64_t>(request.params.max_tokens, room));
    if (spec.num_completions < 1) {
        throw RequestError(fmt::format("n = {} completions; need at least 1", spec.num_completions),
                           "n");
    }
    request.num_completions = spec.num_completions;
    request.priority = spec.priority;
    // A request asking for logprobs decodes without speculation
    // (SamplingParams::logprobs); its tokens are distributed the same.
    if (options_.num_speculative_tokens > 0 && request.params.logprobs < 0) {
        request.params.num_speculative_tokens = options_.num_speculative_tokens;
        request.params.drafter = options_.drafter;
    }
    if (!spec.constraint.empty()) request.params.grammar = compile(spec.constraint);
    // "required" and a named function hold because a grammar forces the calls.
    if (request.tools.requires_calls()) {
        if (!spec.constraint.empty()) {
            throw RequestError(
                fmt::format("tool_choice \"required\" or a named function forces the answer to "
                            "be calls; it cannot also match '{}'",
                            spec.constraint.param),
                "tool_choice");
        }
        request.params.grammar = compile(tool_calls_constraint(request.tools));
    }
    request.params.validate();
    return request;
}

ConstraintSpec RequestBuilder::tool_calls_constraint(const ToolRequest& tools) const {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::kGrammar;
    spec.param = "tools";
    spec.text = tool_call_grammar_key(tools);
    try {
        spec.grammar = std::make_shared<const Grammar>(
            tool_call_grammar(tools, tool_call_syntax(tools.format)));
    } catch (const SchemaError& e) {
        throw RequestError(e.what(), "tools", "unsupported_schema");
    } catch (const GrammarError& e) {
        throw RequestError(e.what(), "tool_choice");
    }
    return spec;
}

GrammarCache& RequestBuilder::grammars() const {
    std::call_once(grammars_made_, [this] {
        grammars_ =
            std::make_unique<GrammarCache>(std::make_shared<const TokenVocabulary>(
                                               TokenVocabulary::from_tokenizer(model_.tokenizer)),
                                           options_.grammar);
    });
    return *grammars_;
}

std::shared_ptr<const CompiledGrammar> RequestBuilder::compile(
    const ConstraintSpec& constraint) const {
    const std::string param = constraint.param.empty() ? "response_format" : constraint.param;
    try {
        return grammars().get(constraint);
    } catch (const SchemaError& e) {
        throw RequestError(e.what(), param, "unsupported_schema");
    } catch (const GrammarError& e) {
        throw RequestError(e.what(), param, "invalid_grammar");
    }
}

}  // namespace servelab
