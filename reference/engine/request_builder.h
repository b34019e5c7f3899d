// request_builder.h — the one front door: what a user asked for → what the engine runs.
//
// Part of the engine (all front ends, chapter 11.7). Every entry point —
// `servelab generate`, `chat`, the benchmarks and the OpenAI server —
// describes its request as a RequestSpec and asks a RequestBuilder for the
// EngineRequest. The rules live here once, so that the same request gives
// the same token ids whichever door it came through:
//   - a text prompt is tokenized as plain text (user-defined tokens only);
//     token ids are taken as given;
//   - a conversation is rendered by the model's chat template
//     (`tokenizer.chat_template`, or ChatML when it has none it can render)
//     with the request's template options and tools, and tokenized with the
//     template's control tokens, and the messages' control-token text parsed
//     or kept plain as the front end chose;
//   - tools are offered only to a model whose template shows a tool-call
//     format (tool_call_format.h); the request carries the format on, for
//     whoever enforces or reads the calls;
//   - BOS comes first when the model asks for one (tokenizer.ggml.add_bos_token)
//     and the prompt does not already start with it (a template may write it);
//   - the prompt must leave room in the context (the model's, or less with
//     max_model_len); an unset max_tokens fills the room, a given one must fit;
//   - n completions are one engine request with n choices, seeded
//     seed + i (completion_params), the prompt computed once;
//   - the front end's speculative decoding applies to every request that
//     does not ask for logprobs;
//   - a constrained request's grammar (Lab 12) is compiled for the model's
//     vocabulary once per constraint text (GrammarCache) and shared.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/error.h"
#include "reference/chat/chat_format.h"
#include "reference/chat/chat_template.h"
#include "reference/chat/tool_request.h"
#include "reference/constrained/constraint_spec.h"
#include "reference/constrained/grammar_cache.h"
#include "reference/model/model.h"
#include "reference/sampling/sampling_params.h"

namespace servelab {

// What a front end received.
struct RequestSpec {
    enum class PromptKind { kText, kTokenIds, kChat };
    PromptKind kind = PromptKind::kText;
    std::string text;                   // kText
    std::vector<TokenId> token_ids;     // kTokenIds
    std::vector<ChatMessage> messages;  // kChat
    // kChat: the open assistant turn (or the last message continued), more variables
    ChatTemplateOptions template_options;
    // kChat: the functions offered, and what the request asks of them
    ToolRequest tools;
    SamplingParams params;
    // false: params.max_tokens is only a default, cut to what the context leaves.
    bool max_tokens_given = true;
    int num_completions = 1;
    // What the output must match (Lab 12); empty = unconstrained. Compiled
    // into params.grammar by build().
    ConstraintSpec constraint;
    int32_t priority = 0;  // the scheduler's, under SchedulingPolicy::kPriority
};

// What the engine runs: Engine::add_parallel_request(prompt, params, n, …, priority).
struct EngineRequest {
    std::vector<TokenId> prompt;
    SamplingParams params;
    int num_completions = 1;
    int32_t priority = 0;
    // The spec's, with `format` set to the model's: how to read (and, with a
    // grammar, force) the calls in the output.
    ToolRequest tools;
};

// A request that cannot run as asked: one line, the field to blame
// ("prompt", "messages", "max_tokens", "n"), and an OpenAI-style code.
class RequestError : public Error {
  public:
    RequestError(const std::string& message, std::string param, std::string code = "")
        : Error(message), param_(std::move(param)), code_(std::move(code)) {}
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }

  private:
    std::string param_;
    std::string code_;
};

// What a front end sets for every request it builds.
struct RequestBuilderOptions {
    SpecialTokensInMessages special_tokens = SpecialTokensInMessages::kParse;
    // Speculative decoding (Lab 6) for every request: K drafted tokens and
    // the engine's drafter to draft them; 0 = off. It never changes what is
    // sampled, only how many forward passes it takes.
    int32_t num_speculative_tokens = 0;
    std::string drafter;
    // The longest request, prompt and output together (capped_context_length:
    // 0 = the model's context). Give it the engine's SchedulerConfig value.
    int64_t max_model_len = 0;
    // How constraints compile (the time limit past which one is refused).
    GrammarCompileOptions grammar;
};

class RequestBuilder {
  public:
    // `model` must outlive the builder. Parses the model's chat template;
    // one that is missing or outside the supported subset means ChatML,
    // with a warning saying why at the first conversation rendered
    // (docs/chat_templates.md).
    explicit RequestBuilder(const Model& model, RequestBuilderOptions options = {});

    // Throws RequestError (and SamplingParams::validate's Error).
    EngineRequest build(const RequestSpec& spec) const;
    // The prompt alone, BOS included.
    std::vector<TokenId> prompt_of(const RequestSpec& spec) const;
    // Renders a conversation as the prompt text: by default with the open
    // assistant turn last and no tools (None). Throws RequestError when the
    // template refuses the messages.
    std::string render_chat(std::span<const ChatMessage> messages,
                            const ChatTemplateOptions& options = {},
                            const ToolRequest& tools = {}) const;
    // Whether chat prompts use the model's own template (else ChatML).
    bool uses_model_template() const { return chat_template_.has_value(); }
    // The tool-call format calls are written in: the one the model's
    // template shows, or Hermes's when it shows none (the tools are then
    // described in the system message: tools_in_prompt()).
    ToolCallFormat tool_call_format() const { return tool_call_format_; }
    bool tools_in_prompt() const { return tools_in_prompt_; }
    // The longest request it builds, prompt and output together.
    int64_t context_length() const { return context_length_; }

    // The compiled grammar of `constraint`, from the cache. Throws
    // RequestError naming constraint.param when it cannot be compiled.
    std::shared_ptr<const CompiledGrammar> compile(const ConstraintSpec& constraint) const;
    // The constraint that forces `tools`' calls (tool_choice "required" or
    // a named function). Throws RequestError naming "tools" for parameters
    // that cannot be enforced.
    ConstraintSpec tool_calls_constraint(const ToolRequest& tools) const;
    // The grammar cache (made at the first constrained request).
    GrammarCache& grammars() const;

  private:
    const Model& model_;
    RequestBuilderOptions options_;
    int64_t context_length_;
    std::optional<ChatTemplate> chat_template_;
    ToolCallFormat tool_call_format_ = ToolCallFormat::kNone;
    // The template shows no tool-call format: tools are described in the
    // system message, calls written as Hermes's (tools_in_prompt.h).
    bool tools_in_prompt_ = false;
    std::string fallback_reason_;  // why there is none (warned at the first chat)
    mutable std::once_flag fallback_warned_;
    mutable std::once_flag grammars_made_;
    mutable std::unique_ptr<GrammarCache> grammars_;
};

}  // namespace servelab
