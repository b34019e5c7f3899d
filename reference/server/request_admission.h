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
//   n       its n choices must fit the model's waiting queue
//           together, or they could never be admitted at all       400
// Nothing here touches the engine: whether the loop has room now is
// asked by submitting (EngineLoop::submit_group, 503 when full). This is the
// HTTP front's admission, not the scheduler's (which admits by free KV
// blocks, Lab 5).
#pragma once

#include <memory>
#include <optional>
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

// Admits `body` (a /v1/chat/completions body when `chat`, else a
// /v1/completions one) to one of `routes`. nullopt when admitted, with
// `admission` filled; else the error to answer, and `admission` is not to be
// used. Thread-safe: routes are only read.
std::optional<ApiError> admit_request(std::string_view body, bool chat,
                                      const std::vector<std::unique_ptr<ModelRoute>>& routes,
                                      Admission& admission);

}  // namespace servelab
