// openai_responses.cpp — see openai_responses.h.
#include "reference/server/openai_responses.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>

#include "reference/model/unicode_categories.h"

namespace servelab {
namespace {

nlohmann::json header_json(const ResponseHeader& header, const char* object) {
    return {{"id", header.id},
            {"object", object},
            {"created", header.created},
            {"model", header.model}};
}

// JSON has no -infinity; vLLM's stand-in.
constexpr double kDroppedLogprob = -9999.0;

double json_logprob(float logprob) {
    return std::isfinite(logprob) ? double(logprob) : kDroppedLogprob;
}

bool is_valid_utf8(std::string_view bytes) {
    while (!bytes.empty()) {
        const int length = utf8_char_length(bytes);
        if (length <= 0) return false;
        bytes.remove_prefix(size_t(length));
    }
    return true;
}

// A token's text as a JSON string: itself when it is whole UTF-8, else
// OpenAI's "bytes:\xNN" spelling.
std::string token_string(const std::string& bytes) {
    if (is_valid_utf8(bytes)) return bytes;
    std::string out = "bytes:";
    for (const unsigned char byte : bytes) out += fmt::format("\\x{:02x}", byte);
    return out;
}

nlohmann::json byte_list(const std::string& bytes) {
    nlohmann::json list = nlohmann::json::array();
    for (const unsigned char byte : bytes) list.push_back(int(byte));
    return list;
}

nlohmann::json chat_entry(const TokenLogprob& logprob, const Tokenizer& tokenizer) {
    const std::string bytes = tokenizer.token_to_bytes(logprob.token);
    return {{"token", token_string(bytes)},
            {"logprob", json_logprob(logprob.logprob)},
            {"bytes", byte_list(bytes)}};
}

}  // namespace

std::string response_text(const nlohmann::json& body) {
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json logprobs_json(bool chat, std::span<const SampledLogprobs> logprobs,
                             const Tokenizer& tokenizer, int64_t text_offset) {
    if (chat) {
        nlohmann::json content = nlohmann::json::array();
        for (const SampledLogprobs& sampled : logprobs) {
            nlohmann::json entry = chat_entry(sampled.chosen, tokenizer);
            nlohmann::json top = nlohmann::json::array();
            for (const TokenLogprob& rival : sampled.top)
                top.push_back(chat_entry(rival, tokenizer));
            entry["top_logprobs"] = top;
            content.push_back(entry);
        }
        return {{"content", content}};
    }
    nlohmann::json tokens = nlohmann::json::array();
    nlohmann::json token_logprobs = nlohmann::json::array();
    nlohmann::json top_logprobs = nlohmann::json::array();
    nlohmann::json offsets = nlohmann::json::array();
    int64_t offset = text_offset;
    for (const SampledLogprobs& sampled : logprobs) {
        const std::string bytes = tokenizer.token_to_bytes(sampled.chosen.token);
        tokens.push_back(token_string(bytes));
        token_logprobs.push_back(json_logprob(sampled.chosen.logprob));
        nlohmann::json top = nlohmann::json::object();
        for (const TokenLogprob& rival : sampled.top) {
            // Two ids can share a text; the more likely (listed first) wins.
            const std::string text = token_string(tokenizer.token_to_bytes(rival.token));
            if (!top.contains(text)) top[text] = json_logprob(rival.logprob);
        }
        top_logprobs.push_back(top);
        offsets.push_back(offset);
        offset += int64_t(bytes.size());
    }
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top_logprobs},
            {"text_offset", offsets}};
}

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                          int64_t cached_prompt_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_prompt_tokens}}}};
}

nlohmann::json completion_response(const ResponseHeader& header,
                                   const std::vector<GenerationResult>& results,
                                   int64_t prompt_tokens, const Tokenizer& tokenizer,
                                   bool with_token_ids) {
    nlohmann::json body = header_json(header, header.chat ? "chat.completion" : "text_completion");
    nlohmann::json choices = nlohmann::json::array();
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < results.size(); ++i) {
        const GenerationResult& result = results[i];
        completion_tokens += int64_t(result.tokens.size());
        // A request that asked has one entry per generated token, so never none.
        nlohmann::json choice = {
            {"index", i},
            {"finish_reason", finish_reason_name(result.finish_reason)},
            {"logprobs", result.logprobs.empty()
                             ? nlohmann::json(nullptr)
                             : logprobs_json(header.chat, result.logprobs, tokenizer)}};
        if (header.chat) {
            choice["message"] = {{"role", "assistant"}, {"content", result.text}};
        } else {
            choice["text"] = result.text;
        }
        if (with_token_ids) choice["token_ids"] = result.tokens;
        choices.push_back(choice);
    }
    body["choices"] = choices;
    if (with_token_ids && !results.empty()) body["prompt_token_ids"] = results[0].prompt_tokens;
    const int64_t cached_tokens = results.empty() ? 0 : results[0].cached_prompt_tokens;
    body["usage"] = usage_json(prompt_tokens, completion_tokens, cached_tokens);
    return body;
}

nlohmann::json stream_chunk(const ResponseHeader& header, int index, const std::string& text,
                            const char* finish_reason, bool first, const nlohmann::json& logprobs) {
    nlohmann::json body =
        header_json(header, header.chat ? "chat.completion.chunk" : "text_completion");
    nlohmann::json choice = {
        {"index", index},
        {"finish_reason", finish_reason ? nlohmann::json(finish_reason) : nlohmann::json(nullptr)},
        {"logprobs", logprobs}};
    if (header.chat) {
        nlohmann::json delta = nlohmann::json::object();
        if (first) delta["role"] = "assistant";
        if (!text.empty() || finish_reason == nullptr) delta["content"] = text;
        choice["delta"] = delta;
    } else {
        choice["text"] = text;
    }
    body["choices"] = nlohmann::json::array({choice});
    return body;
}

nlohmann::json usage_chunk(const ResponseHeader& header, int64_t prompt_tokens,
                           int64_t completion_tokens, int64_t cached_prompt_tokens) {
    nlohmann::json body =
        header_json(header, header.chat ? "chat.completion.chunk" : "text_completion");
    body["choices"] = nlohmann::json::array();
    body["usage"] = usage_json(prompt_tokens, completion_tokens, cached_prompt_tokens);
    return body;
}

}  // namespace servelab
