// runner_options.h — the choices a CPU model runner is built with.
//
// Part of the engine. Each field is a command-line flag, handed to the
// runner when a command builds it (reference/cli/cli_options.h); nothing
// is read from the process afterwards, so two runners in one process may
// choose differently (tests compare them that way).
#pragma once

#include "reference/attention/mla_attention.h"

namespace servelab {

struct RunnerOptions {
    // MLA models (Lab 3): which form attends over the latent cache
    // (--mla-attention). Other models ignore it.
    MlaMode mla_mode = MlaMode::kAbsorbed;
    // Chapter 11.7, kernel fusion (reference/engine/fusion_plan.h): use the
    // fused kernels wherever the plan allows them; --no-fused-kernels turns
    // every one off. The logits are the same bits either way.
    bool fused_kernels = true;
};

}  // namespace servelab
