// model_route.cpp — see model_route.h.
#include "reference/server/model_route.h"

namespace servelab {

ModelRoute::ModelRoute(const ServedModel& served, const RequestBuilderOptions& requests)
    : name(served.name),
      loop(*served.loop),
      tokenizer(served.model->tokenizer),
      builder(*served.model, requests) {
    limits.model_name = served.name;
    limits.context_length = builder.context_length();
    limits.vocab_size = served.model->config.vocab_size;
    limits.priority_scheduling = loop.scheduling_policy() == SchedulingPolicy::kPriority;
}

}  // namespace servelab
