// request_admission.h — a request body becomes one served model's engine requests, or an error.
//
// Part of the serving layer (chapter 11.7). After its body has been read
// (request_body.h), a generation request is admitted in four checks, each
// of which may refuse it with the OpenAI-style answer to send:
//   parse   the body as bounded JSON (request_json.h)            400
//   route   its "model" to one of the served models              400 / 404
//   build   its fields into a prompt and sampling parameters,
//           every field checked (openai_protocol.h), the prompt
//           tokenized and fitted to the context (request_builder.h)  400
//           (a request without "seed" gets a fresh one here, and the
//           fields it ignores are logged in one warning line)
//   n       its n choices must fit the model's waiting queue
//           together, or they could never be admitted at all       400
// Nothing here touches the engine: whether the loop has room now is
// asked by submitting (EngineLoop::submit_group, 503 when full). This is the
// HTTP front's admission, not the scheduler's (which admits by free KV
// blocks, Lab 5).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "reference/engine/request_builder.h"
#include "reference/server/model_route.h"
#include "reference/server/openai_protocol.h"

namespace servelab {

// An admitted request: what it asked for, and what the engine will run.
struct Admission {
    ModelRoute* route = nullptr;   // the model its "model" named
    ApiRequest request;            // the body, every field checked
    EngineRequest engine_request;  // its prompt tokens, parameters and n
};

// Seeds for the requests that give none. Without a fresh seed each, every
// such request would sample with seed 0, and two identical requests at
// temperature 1 would return identical text (vLLM and llama.cpp's server draw
// one too). A request that gives a seed keeps it, and its n choices are
// seeded seed + i either way. One generator per server, seeded from
// std::random_device; thread-safe.
class FreshSeeds {
  public:
    FreshSeeds() : generator_(std::random_device{}()) {}
    uint64_t next() {
        std::lock_guard lock(mutex_);
        return generator_();
    }

  private:
    std::mutex mutex_;
    std::mt19937_64 generator_;
};

// Admits `body` (a /v1/chat/completions body when `chat`, else a
// /v1/completions one) to one of `routes`, seeding it from `seeds` if it
// gives no seed. nullopt when admitted, with `admission` filled; else the
// error to answer, and `admission` is not to be used. Thread-safe: routes
// are only read.
std::optional<ApiError> admit_request(std::string_view body, bool chat,
                                      const std::vector<std::unique_ptr<ModelRoute>>& routes,
                                      FreshSeeds& seeds, Admission& admission);

// The route `body`'s "model" names. Throws ApiException: 400 when the body
// is not an object or has no model, 404 naming the served ones.
ModelRoute& route_for(const nlohmann::json& body,
                      const std::vector<std::unique_ptr<ModelRoute>>& routes);

// The one front door's view of an API request (request_builder.h).
RequestSpec spec_of(const ApiRequest& request);

}  // namespace servelab
