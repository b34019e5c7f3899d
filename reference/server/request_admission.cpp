// request_admission.cpp — see request_admission.h.
#include "reference/server/request_admission.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <string>

#include "reference/server/request_json.h"

namespace servelab {
namespace {

ModelRoute& route_named(const std::vector<std::unique_ptr<ModelRoute>>& routes,
                        const std::string& model_name) {
    for (const auto& route : routes) {
        if (route->name == model_name) return *route;
    }
    throw Error("no route for model " + model_name);  // requested_model() checked the name
}

// n choices are admitted together; more than the queue holds could never
// be, however idle the server.
std::optional<ApiError> too_many_choices(int32_t n, int64_t max_waiting) {
    if (n <= max_waiting) return std::nullopt;
    return ApiError{400, "invalid_request_error",
                    fmt::format("n = {} choices can never be admitted together: the "
                                "server queues at most {} (--max-waiting)",
                                n, max_waiting),
                    "n", ""};
}

}  // namespace

ModelRoute& route_for(const nlohmann::json& body,
                      const std::vector<std::unique_ptr<ModelRoute>>& routes) {
    std::vector<std::string> names;
    for (const auto& route : routes) names.push_back(route->name);
    return route_named(routes, requested_model(body, names));
}

RequestSpec spec_of(const ApiRequest& request) {
    RequestSpec spec;
    if (request.chat) {
        spec.kind = RequestSpec::PromptKind::kChat;
        spec.messages = request.messages;
        spec.template_options = request.template_options;
        spec.tools = request.tools;
    } else if (!request.prompt_ids.empty()) {
        spec.kind = RequestSpec::PromptKind::kTokenIds;
        spec.token_ids = request.prompt_ids;
    } else {
        spec.kind = RequestSpec::PromptKind::kText;
        spec.text = request.prompt_text;
    }
    spec.params = request.params;
    spec.max_tokens_given = request.max_tokens_given;
    spec.num_completions = request.n;
    spec.constraint = request.constraint;
    spec.priority = request.priority;
    return spec;
}

std::optional<ApiError> admit_request(std::string_view body, bool chat,
                                      const std::vector<std::unique_ptr<ModelRoute>>& routes,
                                      FreshSeeds& seeds, Admission& admission) {
    try {
        // Keys in order: a chat request's tools reach the template as written.
        const nlohmann::ordered_json ordered = parse_ordered_request_json(body);
        const nlohmann::json json = ordered;
        admission.route = &route_for(json, routes);
        admission.request = parse_api_request(ordered, chat, admission.route->limits);
        // Drawn once per request, so its n choices are still seed + i.
        if (!admission.request.seed_given) admission.request.params.seed = seeds.next();
        if (!admission.request.ignored_fields.empty()) {
            spdlog::warn("{} {}: {}", chat ? "/v1/chat/completions" : "/v1/completions",
                         admission.route->name,
                         ignored_fields_line(admission.request.ignored_fields));
        }
        admission.engine_request = admission.route->builder.build(spec_of(admission.request));
    } catch (const ApiException& e) {
        return e.error();
    } catch (const RequestError& e) {
        return ApiError{400, "invalid_request_error", e.what(), e.param(), e.code()};
    }
    return too_many_choices(admission.request.n, admission.route->loop.max_waiting());
}

}  // namespace servelab
