// tokenize_route.cpp — see tokenize_route.h.
#include "reference/server/tokenize_route.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string>

#include "reference/server/request_admission.h"
#include "reference/server/request_json.h"

namespace servelab {
namespace {

void log_ignored(const char* path, const ModelRoute& route,
                 const std::vector<std::string>& ignored_fields) {
    if (ignored_fields.empty()) return;
    spdlog::warn("{} {}: {}", path, route.name, ignored_fields_line(ignored_fields));
}

std::vector<TokenId> tokenize_body(const nlohmann::json& body, const ModelRoute& route) {
    const bool chat = body.contains("messages");
    if (chat && body.contains("prompt")) {
        refuse_field("prompt", "give 'prompt' or 'messages', not both");
    }
    if (!chat && !body.contains("prompt")) {
        refuse_field("prompt", "'prompt' (a text or token ids) or 'messages' is required");
    }
    // Parsed as the generation route parses it (a conversation's
    // add_generation_prompt, tools and template variables included).
    ApiRequest request = parse_api_request(body, chat, route.limits);
    log_ignored("/tokenize", route, request.ignored_fields);
    return route.builder.prompt_of(spec_of(request));
}

std::vector<TokenId> detokenize_body(const nlohmann::json& body, const ModelRoute& route) {
    const auto tokens = body.find("tokens");
    if (tokens == body.end() || !tokens->is_array()) {
        refuse_field("tokens", "'tokens' must be a list of token ids");
    }
    std::vector<TokenId> ids;
    for (const nlohmann::json& id : *tokens) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= route.limits.vocab_size) {
            refuse_field("tokens", fmt::format("'tokens' must hold token ids in [0, {})",
                                               route.limits.vocab_size));
        }
        ids.push_back(TokenId(id.get<int64_t>()));
    }
    log_ignored("/detokenize", route, unknown_fields(body, {"model", "tokens"}));
    return ids;
}

}  // namespace

std::optional<ApiError> tokenize_answer(std::string_view body,
                                        const std::vector<std::unique_ptr<ModelRoute>>& routes,
                                        nlohmann::json& answer) {
    try {
        const nlohmann::json json = parse_request_json(body);
        const ModelRoute& route = route_for(json, routes);
        const std::vector<TokenId> tokens = tokenize_body(json, route);
        answer = {{"count", tokens.size()},
                  {"max_model_len", route.builder.context_length()},
                  {"tokens", tokens}};
    } catch (const ApiException& e) {
        return e.error();
    } catch (const RequestError& e) {
        return ApiError{400, "invalid_request_error", e.what(), e.param(), e.code()};
    }
    return std::nullopt;
}

std::optional<ApiError> detokenize_answer(std::string_view body,
                                          const std::vector<std::unique_ptr<ModelRoute>>& routes,
                                          nlohmann::json& answer) {
    try {
        const nlohmann::json json = parse_request_json(body);
        const ModelRoute& route = route_for(json, routes);
        const std::vector<TokenId> tokens = detokenize_body(json, route);
        answer = {{"prompt", route.tokenizer.decode(tokens, /*render_special=*/true)}};
    } catch (const ApiException& e) {
        return e.error();
    }
    return std::nullopt;
}

}  // namespace servelab
