// KNOWN-WRONG implementation for the grader self-test (tests/labs/README.md): plan_step ignores the
// cache and always starts at position 0. step_plan.cpp — see step_plan.h. Lab 2's exercise:
// plan_step.
#include "reference/engine/step_plan.h"

namespace servelab {

StepInput plan_step(std::span<const TokenId> sequence, const KvCache* cache) {
    const int64_t first_uncached = 0;  // recomputes everything, cache or not
    return StepInput{sequence.subspan(size_t(first_uncached)), first_uncached,
                     LogitsFor::kLastToken};
}

}  // namespace servelab
