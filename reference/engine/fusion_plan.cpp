// fusion_plan.cpp — see fusion_plan.h.
#include "reference/engine/fusion_plan.h"

#include "reference/common/exercise_files.h"

namespace servelab {

namespace {

// The exercise files whose kernels each fusion does the work of.
constexpr std::string_view kRmsnormFile = "kernels/cpu/rmsnorm.cpp";
constexpr std::string_view kRopeFile = "kernels/cpu/rope.cpp";
constexpr std::string_view kSwigluFile = "kernels/cpu/swiglu.cpp";

}  // namespace

FusionPlan all_fusions() {
    return {.rmsnorm_quantize = true,
            .add_rmsnorm = true,
            .rope_in_qkv = true,
            .swiglu_in_gate_up = true};
}

FusionPlan plan_fusions(bool requested,
                        const std::function<bool(std::string_view path)>& reference_linked) {
    if (!requested) return {};
    const bool rmsnorm = reference_linked(kRmsnormFile);
    return {.rmsnorm_quantize = rmsnorm,
            .add_rmsnorm = rmsnorm,
            .rope_in_qkv = reference_linked(kRopeFile),
            .swiglu_in_gate_up = reference_linked(kSwigluFile)};
}

FusionPlan plan_fusions(bool requested) {
    return plan_fusions(requested, reference_exercise_file_linked);
}

std::string describe(const FusionPlan& plan) {
    std::string text;
    const auto add = [&text](bool on, const char* name) {
        if (!on) return;
        if (!text.empty()) text += ' ';
        text += name;
    };
    add(plan.rmsnorm_quantize, "rmsnorm_quantize");
    add(plan.add_rmsnorm, "add_rmsnorm");
    add(plan.rope_in_qkv, "rope_in_qkv");
    add(plan.swiglu_in_gate_up, "swiglu_in_gate_up");
    return text.empty() ? "none" : text;
}

}  // namespace servelab
