// request_builder.cpp — see request_builder.h.
#include "reference/engine/request_builder.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "reference/constrained/json_schema_grammar.h"

namespace servelab {

RequestBuilder::RequestBuilder(const Model& model, RequestBuilderOptions options)
    : model_(model),
      options_(options),
      context_length_(capped_context_length(model.config, options.max_model_len)) {
    chat_template_ = load_chat_template(model.file, fallback_reason_);
}

std::string RequestBuilder::render_chat(std::span<const ChatMessage> messages,
                                        bool add_generation_prompt) const {
    if (!chat_template_) {
        // Said once, and only to a front end that renders a conversation.
        std::call_once(fallback_warned_,
                       [this] { spdlog::warn("{}: chat prompts use ChatML", fallback_reason_); });
        return format_chatml(messages, add_generation_prompt);
    }
    ChatTemplateInputs inputs;
    inputs.messages = messages;
    inputs.add_generation_prompt = add_generation_prompt;
    set_special_tokens(inputs, model_.tokenizer);
    try {
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
                    return render_chat(messages, spec.add_generation_prompt);
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
    request.params.validate();
    return request;
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
