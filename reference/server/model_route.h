// model_route.h — a model the OpenAI server answers for, and what it keeps per model.
//
// Part of the serving layer (chapter 11.7). `serve --model a --model b`
// serves several models from one server: a request's "model" field picks
// one route (request_admission.h), and everything after that, building the
// prompt, queueing it, counting its metrics and spelling its logprobs,
// uses that route's own parts, never another model's.
#pragma once

#include <string>

#include "reference/engine/request_builder.h"
#include "reference/model/model.h"
#include "reference/model/tokenizer.h"
#include "reference/server/engine_loop.h"
#include "reference/server/openai_protocol.h"
#include "reference/server/server_metrics.h"

namespace servelab {

// A model the server answers for, as the caller hands it over.
struct ServedModel {
    std::string name;  // what requests' "model" says, and /v1/models lists
    const Model* model = nullptr;
    EngineLoop* loop = nullptr;  // the loop running this model's engine
};

// Everything the server keeps per model. The model and its loop must
// outlive the route.
struct ModelRoute {
    ModelRoute(const ServedModel& served, const RequestBuilderOptions& requests);
    std::string name;
    EngineLoop& loop;
    const Tokenizer& tokenizer;  // the model's: token texts for logprobs
    RequestBuilder builder;
    ProtocolLimits limits;
    ServerMetrics metrics;  // thread-safe: every handler of this model counts here
};

}  // namespace servelab
