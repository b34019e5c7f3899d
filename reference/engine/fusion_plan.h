// fusion_plan.h — which fused kernels the CPU forward pass uses.
//
// Part of the engine (chapter 11.7, kernel fusion: merging operators to cut
// memory traffic; docs/kernel_fusion.md). Four fusions, each with the plain
// kernels it replaces and the exercise file that holds them:
//   rmsnorm_quantize   RMSNorm writes fast mode's int8 blocks     kernels/cpu/rmsnorm.cpp
//   add_rmsnorm        x += delta fused with the next RMSNorm     kernels/cpu/rmsnorm.cpp
//   rope_in_qkv        RoPE in the Q/K/V matmul's epilogue         kernels/cpu/rope.cpp
//   swiglu_in_gate_up  silu(gate)·up in the gate/up epilogue       kernels/cpu/swiglu.cpp
// A fusion is planned only where it is asked for (RunnerOptions::fused_kernels,
// on by default; the CLI's --no-fused-kernels turns all off) and the
// reference version of its file is linked (reference/common/exercise_files.h):
// a lab engine whose student writes rmsnorm runs the student's rmsnorm, never
// a fused copy of ours. The layer walk (llama_forward.h) picks each step's
// kernels from the plan once, when it is built.
// Each fusion gives the same numbers as the plain kernels, bit for bit
// (tests/unit/fused_kernels_test.cpp); what it saves is memory traffic.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace servelab {

struct FusionPlan {
    bool rmsnorm_quantize = false;
    bool add_rmsnorm = false;
    bool rope_in_qkv = false;
    bool swiglu_in_gate_up = false;

    bool operator==(const FusionPlan&) const = default;
};

// Every fusion on, or every one off.
FusionPlan all_fusions();

// The fusions that may run: `requested` ones whose bypassed exercise file
// `reference_linked` reports as the reference version.
FusionPlan plan_fusions(bool requested,
                        const std::function<bool(std::string_view path)>& reference_linked);
// The same for this binary's files: what a runner built with
// RunnerOptions::fused_kernels = `requested` uses.
FusionPlan plan_fusions(bool requested);

// "rmsnorm_quantize add_rmsnorm rope_in_qkv swiglu_in_gate_up", the ones on;
// "none" when none is.
std::string describe(const FusionPlan& plan);

}  // namespace servelab
