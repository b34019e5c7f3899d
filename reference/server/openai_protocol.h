// openai_protocol.h — OpenAI-compatible request bodies in, engine parameters out.
//
// Part of the serving layer (chapter 11.7). The HTTP layer hands
// a parsed JSON body here and gets back either a request the engine can run
// or an ApiError: the HTTP status and the OpenAI-style error body
//   {"error": {"message": …, "type": "invalid_request_error", "param": …, "code": …}}
// that real clients (the `openai` package) turn into their exceptions. Every
// field is checked for type and range here, so nothing malformed reaches the
// engine. Supported: /v1/completions (prompt: a string or a list of token
// ids) and /v1/chat/completions (messages, tools and the chat template's
// options: chat_request.h); temperature, top_p, top_k, min_p, presence_penalty,
// frequency_penalty, logit_bias, logprobs (and chat's top_logprobs),
// max_tokens (or max_completion_tokens), stop, seed (absent: the server
// draws one per request), n, stream, stream_options.include_usage, echo
// (false only), best_of (1 only), tools, tool_choice, parallel_tool_calls
// (chat_request.h), what the output must match (response_format and its
// kin, structured_output_request.h), and the extensions vLLM also accepts:
// repetition_penalty, ignore_eos, min_tokens, stop_token_ids, priority and
// return_token_ids.
// Fields that would change the output in ways the engine cannot honour
// (kRefusedFields in the .cpp: functions, suffix, best_of above 1,
// echo: true, audio, web_search_options) are refused, never silently
// ignored. Any other field is listed in ApiRequest::ignored_fields, which
// the server logs (as vLLM warns).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/error.h"
#include "reference/chat/chat_format.h"
#include "reference/chat/chat_template.h"
#include "reference/chat/tool_request.h"
#include "reference/constrained/constraint_spec.h"
#include "reference/sampling/sampling_params.h"
#include "reference/sampling/token_logprobs.h"

namespace servelab {

struct ApiError {
    int status = 400;
    std::string type = "invalid_request_error";
    std::string message;
    std::string param;  // the offending field, or empty
    std::string code;   // e.g. "model_not_found", or empty
};

// Thrown by the parsers; carries the HTTP answer.
class ApiException : public Error {
  public:
    explicit ApiException(ApiError error) : Error(error.message), error_(std::move(error)) {}
    const ApiError& error() const { return error_; }

  private:
    ApiError error_;
};

nlohmann::json error_body(const ApiError& error);

// Throws ApiException: 400, invalid_request_error, naming `param` (the
// field at fault, a dotted path for a nested one). Every request parser of
// the server refuses through this one door.
[[noreturn]] void refuse_field(const std::string& param, const std::string& message);

// The member `name` of a request object, or nullptr when it is absent or
// null (a client's way of leaving a field out). For nlohmann::json and
// ordered_json alike.
template <class Json>
const Json* request_field(const Json& object, const char* name) {
    const auto it = object.find(name);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
}

struct ProtocolLimits {
    std::string model_name;           // what /v1/models lists; requests must name it
    int64_t context_length = 0;       // prompt + max_tokens must fit
    int64_t vocab_size = 0;           // token-id prompts are checked against it
    int32_t default_max_tokens = 16;  // OpenAI's default for completions
    int32_t max_n = 16;
    // The engine schedules by priority (--policy priority): only then may a
    // request set a non-zero "priority" (vLLM refuses it otherwise too).
    bool priority_scheduling = false;
};

// The most stop_token_ids one request may give (each generated token is
// looked up among them).
inline constexpr size_t kMaxStopTokenIds = 256;

struct ApiRequest {
    bool chat = false;
    std::string model;
    std::vector<ChatMessage> messages;  // chat
    // chat: add_generation_prompt, continue_final_message, chat_template_kwargs
    ChatTemplateOptions template_options;
    // chat: tools, tool_choice, parallel_tool_calls (chat_request.h)
    ToolRequest tools;
    std::string prompt_text;          // completions, a string prompt
    std::vector<TokenId> prompt_ids;  // completions, a token-id prompt
    SamplingParams params;
    // false: max_tokens was not given, and the server fills the context (chat) after tokenizing
    bool max_tokens_given = false;
    // false: "seed" was not given, and the server draws one (params.seed is 0 until then)
    bool seed_given = false;
    int32_t priority = 0;  // the scheduler's (--policy priority): smaller runs first
    int32_t n = 1;
    bool stream = false;
    bool include_usage = false;     // stream_options.include_usage
    bool return_token_ids = false;  // extension: prompt_token_ids and each choice's token_ids
    // What the output must match (structured_output_request.h); empty = free text.
    ConstraintSpec constraint;
    // Top-level fields the server neither reads nor refuses, by name (a
    // parsed body keeps its keys sorted): they change nothing, and the
    // server logs them, one line per request.
    std::vector<std::string> ignored_fields;
};

// 404 model_not_found for `name`, naming the served models.
ApiError unknown_model_error(const std::string& name,
                             const std::vector<std::string>& served_model_names);

// The body's "model", which must be one of `served_model_names`: a server of
// several models routes the request by it. Throws ApiException: 400 when the
// body is not an object or "model" is not a string, 404 (naming the served
// models) for an unknown one.
std::string requested_model(const nlohmann::json& body,
                            const std::vector<std::string>& served_model_names);

// Throws ApiException (status 400, or 404 for an unknown model).
ApiRequest parse_api_request(const nlohmann::json& body, bool chat, const ProtocolLimits& limits);
// The same for a body parsed with its keys in order (parse_ordered_request_json):
// a chat request's tools and template variables reach the template as written.
ApiRequest parse_api_request(const nlohmann::ordered_json& body, bool chat,
                             const ProtocolLimits& limits);

// The fields of the object `body` that are not in `known`, by name.
std::vector<std::string> unknown_fields(const nlohmann::json& body,
                                        const std::vector<std::string_view>& known);

// The log line for a request's ignored fields: "fields ignored: a, b", at
// most 16 names of at most 64 bytes each, then how many more (a body may
// hold thousands).
std::string ignored_fields_line(const std::vector<std::string>& ignored_fields);

}  // namespace servelab
