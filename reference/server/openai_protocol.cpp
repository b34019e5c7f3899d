// openai_protocol.cpp — see openai_protocol.h.
#include "reference/server/openai_protocol.h"

#include "reference/server/structured_output_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <set>

#include "reference/server/chat_request.h"

namespace servelab {
namespace {

double number(const nlohmann::json& body, const char* name, double fallback, double low,
              double high) {
    const nlohmann::json* value = request_field(body, name);
    if (value == nullptr) return fallback;
    if (!value->is_number()) refuse_field(name, fmt::format("'{}' must be a number", name));
    const double x = value->get<double>();
    if (!(x >= low && x <= high)) {
        refuse_field(name, fmt::format("'{}' must be in [{}, {}], got {}", name, low, high, x));
    }
    return x;
}

int64_t integer(const nlohmann::json& body, const char* name, int64_t fallback, int64_t low,
                int64_t high) {
    const nlohmann::json* value = request_field(body, name);
    if (value == nullptr) return fallback;
    if (!value->is_number_integer())
        refuse_field(name, fmt::format("'{}' must be an integer", name));
    const int64_t x = value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : value->get<int64_t>();
    if (x < low || x > high) {
        refuse_field(name, fmt::format("'{}' must be in [{}, {}], got {}", name, low, high, x));
    }
    return x;
}

bool boolean(const nlohmann::json& body, const char* name) {
    const nlohmann::json* value = request_field(body, name);
    if (value == nullptr) return false;
    if (!value->is_boolean()) refuse_field(name, fmt::format("'{}' must be true or false", name));
    return value->get<bool>();
}

std::vector<std::string> stop_strings(const nlohmann::json& body) {
    const nlohmann::json* value = request_field(body, "stop");
    if (value == nullptr) return {};
    if (value->is_string()) return {value->get<std::string>()};
    if (!value->is_array() || value->size() > 4) {
        refuse_field("stop", "'stop' must be a string or a list of at most 4 strings");
    }
    std::vector<std::string> stops;
    for (const nlohmann::json& item : *value) {
        if (!item.is_string() || item.get<std::string>().empty()) {
            refuse_field("stop", "'stop' must hold non-empty strings");
        }
        stops.push_back(item.get<std::string>());
    }
    return stops;
}

void completion_prompt(const nlohmann::json& body, const ProtocolLimits& limits,
                       ApiRequest& request) {
    const nlohmann::json* value = request_field(body, "prompt");
    if (value == nullptr) refuse_field("prompt", "'prompt' is required");
    if (value->is_string()) {
        request.prompt_text = value->get<std::string>();
        if (request.prompt_text.empty()) refuse_field("prompt", "'prompt' is empty");
        return;
    }
    if (value->is_array() && !value->empty() && (*value)[0].is_number_integer()) {
        for (const nlohmann::json& id : *value) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
                id.get<int64_t>() >= limits.vocab_size) {
                refuse_field("prompt", fmt::format("token ids must be integers in [0, {})",
                                                   limits.vocab_size));
            }
            request.prompt_ids.push_back(TokenId(id.get<int64_t>()));
        }
        return;
    }
    refuse_field("prompt",
                 "'prompt' must be a string or a list of token ids (one prompt per request)");
}

// The fields the engine cannot honour: the one list. Each is refused with a
// 400 naming it, never ignored; docs/serving.md lists them, and
// tests/e2e/test_openai_server.py reads that list and sends each. Functions
// (the legacy spelling of tools), a suffix to insert before, the best of
// several samples, the prompt echoed with its logprobs, audio output, a web
// search.
constexpr std::string_view kRefusedFields[] = {"functions", "suffix", "best_of",
                                               "echo",      "audio",  "web_search_options"};

// A refused field set to what the server does anyway is accepted: echo
// false (the prompt is not repeated) and best_of 1 (one sample is its own
// best). The hint says so in the refusal of any other value.
bool asks_for_what_is_done_anyway(std::string_view name, const nlohmann::json& value,
                                  std::string& hint) {
    if (name == "echo") {
        hint = " (only false)";
        return value.is_boolean() && !value.get<bool>();
    }
    if (name == "best_of") {
        hint = " (only 1)";
        return value.is_number_integer() && value.get<int64_t>() == 1;
    }
    return false;
}

void refuse_unsupported(const nlohmann::json& body) {
    for (const std::string_view name : kRefusedFields) {
        const nlohmann::json* value = request_field(body, std::string(name).c_str());
        if (value == nullptr) continue;
        std::string hint;
        if (asks_for_what_is_done_anyway(name, *value, hint)) continue;
        refuse_field(std::string(name),
                     fmt::format("'{}' is not supported by this server{}", name, hint));
    }
}

// The top-level fields parse_api_request reads, for both APIs (besides
// "prompt" or "messages", and the refused ones). Anything else is ignored,
// and listed in ApiRequest::ignored_fields.
constexpr std::string_view kReadFields[] = {
    // the request
    "model", "n", "stream", "stream_options", "return_token_ids", "priority",
    // the sampler
    "temperature", "top_p", "top_k", "min_p", "seed", "logit_bias", "repetition_penalty",
    "presence_penalty", "frequency_penalty",
    // the length and the stops
    "max_tokens", "max_completion_tokens", "min_tokens", "ignore_eos", "stop", "stop_token_ids",
    // log-probabilities
    "logprobs", "top_logprobs",
    // what the output must match (structured_output_request.h)
    "response_format", "structured_outputs", "json_schema", "grammar"};

std::vector<std::string_view> known_fields(bool chat) {
    std::vector<std::string_view> known(std::begin(kReadFields), std::end(kReadFields));
    known.insert(known.end(), std::begin(kRefusedFields), std::end(kRefusedFields));
    known.insert(known.end(), std::begin(kChatFields), std::end(kChatFields));
    if (!chat) known.push_back("prompt");
    return known;
}

// vLLM's extension: generation also ends at these ids (not before min_tokens).
std::vector<TokenId> stop_token_ids(const nlohmann::json& body, const ProtocolLimits& limits) {
    const nlohmann::json* value = request_field(body, "stop_token_ids");
    if (value == nullptr) return {};
    if (!value->is_array() || value->size() > kMaxStopTokenIds) {
        refuse_field("stop_token_ids",
                     fmt::format("'stop_token_ids' must be a list of at most {} token ids",
                                 kMaxStopTokenIds));
    }
    std::vector<TokenId> ids;
    for (const nlohmann::json& id : *value) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= limits.vocab_size) {
            refuse_field(
                "stop_token_ids",
                fmt::format("'stop_token_ids' must hold token ids in [0, {})", limits.vocab_size));
        }
        ids.push_back(TokenId(id.get<int64_t>()));
    }
    return ids;
}

// The scheduler's priority (smaller runs first, as in vLLM). Only a server
// that schedules by it may take a non-zero one: elsewhere it would be
// accepted and mean nothing.
int32_t request_priority(const nlohmann::json& body, const ProtocolLimits& limits) {
    const int32_t priority = int32_t(integer(body, "priority", 0, INT32_MIN, INT32_MAX));
    if (priority != 0 && !limits.priority_scheduling) {
        refuse_field("priority",
                     "'priority' needs a server started with --policy priority (this one schedules "
                     "without priorities)");
    }
    return priority;
}

// SamplingParams::logprobs from the two APIs' spellings. Chat: "logprobs":
// true, and "top_logprobs": k alternatives (only with it). Completions (the
// legacy API): "logprobs": k, the chosen token's plus k alternatives.
int32_t requested_logprobs(const nlohmann::json& body, bool chat) {
    if (!chat) {
        if (request_field(body, "top_logprobs") != nullptr) {
            refuse_field("top_logprobs",
                         "'top_logprobs' is a chat field; completions take 'logprobs': k");
        }
        return int32_t(integer(body, "logprobs", -1, 0, kMaxTopLogprobs));
    }
    const bool wanted = boolean(body, "logprobs");
    if (request_field(body, "top_logprobs") != nullptr && !wanted) {
        refuse_field("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    if (!wanted) return -1;
    return int32_t(integer(body, "top_logprobs", 0, 0, kMaxTopLogprobs));
}

// {"token id": bias, ...}: keys are token ids as strings (JSON keys are
// strings), biases in [-100, 100]; at most 300 entries, as OpenAI allows.
std::vector<std::pair<TokenId, float>> logit_bias(const nlohmann::json& body,
                                                  const ProtocolLimits& limits) {
    const nlohmann::json* value = request_field(body, "logit_bias");
    if (value == nullptr) return {};
    if (!value->is_object() || value->size() > 300) {
        refuse_field("logit_bias",
                     "'logit_bias' must be an object of at most 300 {\"token id\": bias}");
    }
    std::vector<std::pair<TokenId, float>> biases;
    for (const auto& [key, bias] : value->items()) {
        int64_t id = -1;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (key.empty() || ec != std::errc() || end != key.data() + key.size() || id < 0 ||
            id >= limits.vocab_size) {
            refuse_field("logit_bias",
                         fmt::format("'logit_bias' keys must be token ids in [0, {}), got "
                                     "'{}'",
                                     limits.vocab_size, key.substr(0, 32)));
        }
        if (!bias.is_number() || !(bias.get<double>() >= -100.0 && bias.get<double>() <= 100.0)) {
            refuse_field("logit_bias", fmt::format("'logit_bias' for token {} must be a number in "
                                                   "[-100, 100]",
                                                   id));
        }
        biases.emplace_back(TokenId(id), float(bias.get<double>()));
    }
    return biases;
}

}  // namespace

void refuse_field(const std::string& param, const std::string& message) {
    throw ApiException(ApiError{400, "invalid_request_error", message, param, ""});
}

nlohmann::json error_body(const ApiError& error) {
    return {
        {"error",
         {{"message", error.message},
          {"type", error.type},
          {"param", error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param)},
          {"code", error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code)}}}};
}

std::string requested_model(const nlohmann::json& body,
                            const std::vector<std::string>& served_model_names) {
    if (!body.is_object()) refuse_field("", "the request body must be a JSON object");
    const nlohmann::json* model = request_field(body, "model");
    if (model == nullptr || !model->is_string()) refuse_field("model", "'model' must be a string");
    const std::string name = model->get<std::string>();
    for (const std::string& served : served_model_names) {
        if (name == served) return name;
    }
    throw ApiException(unknown_model_error(name, served_model_names));
}

ApiError unknown_model_error(const std::string& name,
                             const std::vector<std::string>& served_model_names) {
    std::string known;
    for (const std::string& served : served_model_names) {
        known += (known.empty() ? "'" : ", '") + served + "'";
    }
    return ApiError{
        404, "invalid_request_error",
        fmt::format("the model '{}' does not exist; this server serves {}", name, known), "model",
        "model_not_found"};
}

ApiRequest parse_api_request(const nlohmann::json& body, bool chat, const ProtocolLimits& limits) {
    return parse_api_request(nlohmann::ordered_json(body), chat, limits);
}

ApiRequest parse_api_request(const nlohmann::ordered_json& ordered_body, bool chat,
                             const ProtocolLimits& limits) {
    const nlohmann::json body = ordered_body;  // the chat fields alone need the order
    ApiRequest request;
    request.chat = chat;
    request.model = requested_model(body, {limits.model_name});
    refuse_unsupported(body);
    if (chat) {
        ChatRequest chat_request = parse_chat_request(ordered_body);
        request.messages = std::move(chat_request.messages);
        request.template_options = std::move(chat_request.template_options);
        request.tools = std::move(chat_request.tools);
    } else {
        refuse_chat_fields(body);
        completion_prompt(body, limits, request);
    }
    SamplingParams& p = request.params;
    p.temperature = float(number(body, "temperature", 1.0, 0.0, 2.0));
    p.top_p = float(number(body, "top_p", 1.0, 0.0, 1.0));
    if (p.top_p == 0.0f) refuse_field("top_p", "'top_p' must be greater than 0");
    // Any top_k <= 0 is off: vLLM's -1, and OpenAI-style clients' 0.
    p.top_k =
        int32_t(std::max<int64_t>(0, integer(body, "top_k", 0, INT32_MIN, limits.vocab_size)));
    p.min_p = float(number(body, "min_p", 0.0, 0.0, 1.0));
    p.repetition_penalty = float(number(body, "repetition_penalty", 1.0, 0.01, 10.0));
    p.presence_penalty = float(number(body, "presence_penalty", 0.0, -2.0, 2.0));
    p.frequency_penalty = float(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
    p.logit_bias = logit_bias(body, limits);
    p.logprobs = requested_logprobs(body, chat);
    p.seed = uint64_t(integer(body, "seed", 0, INT64_MIN, INT64_MAX));
    request.seed_given = request_field(body, "seed") != nullptr;
    const int64_t default_max = chat ? limits.context_length : limits.default_max_tokens;
    int64_t max_tokens = integer(body, "max_tokens", default_max, 1, limits.context_length);
    max_tokens = integer(body, "max_completion_tokens", max_tokens, 1, limits.context_length);
    p.max_tokens = int32_t(max_tokens);
    request.max_tokens_given = request_field(body, "max_tokens") != nullptr ||
                               request_field(body, "max_completion_tokens") != nullptr;
    p.stop_strings = stop_strings(body);
    p.stop_token_ids = stop_token_ids(body, limits);
    // An extension vLLM and llama.cpp share: benchmarks fix the output length.
    p.ignore_eos = boolean(body, "ignore_eos");
    p.min_tokens = int32_t(integer(body, "min_tokens", 0, 0, p.max_tokens));
    request.n = int32_t(integer(body, "n", 1, 1, limits.max_n));
    request.priority = request_priority(body, limits);
    request.stream = boolean(body, "stream");
    if (const nlohmann::json* options = request_field(body, "stream_options")) {
        if (!options->is_object())
            refuse_field("stream_options", "'stream_options' must be an object");
        request.include_usage = boolean(*options, "include_usage");
    }
    // An extension vLLM also has: the prompt's and each choice's token ids,
    // for checking what a server computed against an offline run.
    request.return_token_ids = boolean(body, "return_token_ids");
    if (request.return_token_ids && request.stream) {
        refuse_field("return_token_ids", "'return_token_ids' is supported only without 'stream'");
    }
    request.constraint = parse_constraint(ordered_body);
    try {
        p.validate();
    } catch (const Error& e) {
        refuse_field("", e.what());
    }
    request.ignored_fields = unknown_fields(body, known_fields(chat));
    return request;
}

std::vector<std::string> unknown_fields(const nlohmann::json& body,
                                        const std::vector<std::string_view>& known) {
    std::vector<std::string> unknown;
    if (!body.is_object()) return unknown;
    for (const auto& [name, value] : body.items()) {
        if (std::find(known.begin(), known.end(), name) == known.end()) unknown.push_back(name);
    }
    return unknown;
}

std::string ignored_fields_line(const std::vector<std::string>& ignored_fields) {
    constexpr size_t kMaxNames = 16;
    constexpr size_t kMaxNameBytes = 64;
    std::string line = "fields ignored:";
    for (size_t i = 0; i < ignored_fields.size() && i < kMaxNames; ++i) {
        // A name is the client's text: cut short, and no control byte may
        // break the log line (or forge another).
        std::string name = ignored_fields[i].substr(0, kMaxNameBytes);
        for (char& c : name) {
            if (uint8_t(c) < 0x20 || c == 0x7f) c = '?';
        }
        if (ignored_fields[i].size() > kMaxNameBytes) name += "...";
        line += (i == 0 ? " " : ", ") + name;
    }
    if (ignored_fields.size() > kMaxNames) {
        line += fmt::format(" and {} more", ignored_fields.size() - kMaxNames);
    }
    return line;
}

}  // namespace servelab
