// openai_responses.cpp — see openai_responses.h.
#include "reference/server/openai_responses.h"

namespace servelab {
namespace {

nlohmann::json header_json(const ResponseHeader& header, const char* object) {
    return {{"id", header.id},
            {"object", object},
            {"created", header.created},
            {"model", header.model}};
}

}  // namespace

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json completion_response(const ResponseHeader& header,
                                   const std::vector<GenerationResult>& results,
                                   int64_t prompt_tokens, bool with_token_ids) {
    nlohmann::json body = header_json(header, header.chat ? "chat.completion" : "text_completion");
    nlohmann::json choices = nlohmann::json::array();
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < results.size(); ++i) {
        const GenerationResult& result = results[i];
        completion_tokens += int64_t(result.tokens.size());
        nlohmann::json choice = {{"index", i},
                                 {"finish_reason", finish_reason_name(result.finish_reason)},
                                 {"logprobs", nullptr}};
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
    body["usage"] = usage_json(prompt_tokens, completion_tokens);
    return body;
}

nlohmann::json stream_chunk(const ResponseHeader& header, int index, const std::string& text,
                            const char* finish_reason, bool first) {
    nlohmann::json body =
        header_json(header, header.chat ? "chat.completion.chunk" : "text_completion");
    nlohmann::json choice = {
        {"index", index},
        {"finish_reason", finish_reason ? nlohmann::json(finish_reason) : nlohmann::json(nullptr)},
        {"logprobs", nullptr}};
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
                           int64_t completion_tokens) {
    nlohmann::json body =
        header_json(header, header.chat ? "chat.completion.chunk" : "text_completion");
    body["choices"] = nlohmann::json::array();
    body["usage"] = usage_json(prompt_tokens, completion_tokens);
    return body;
}

}  // namespace servelab
