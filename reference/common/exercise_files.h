// exercise_files.h — which exercise files this binary links in their reference version.
//
// Part of the lab framework, used by kernel fusion (chapter 11.7,
// docs/kernel_fusion.md). A fused kernel does the work of several plain ones.
// In a lab build, a planted-bug build or a mutation-test build one of those
// plain kernels is someone's own code (labs/labNN_*/student/, a patch of
// tests/labs/, a mutant of tools/labkit/mutate.py), and a fusion would route the
// engine around it: the student's rmsnorm would never run. So the engine
// fuses only where the reference version of every file a fusion bypasses is
// the one linked (reference/engine/fusion_plan.h).
//
// How a binary knows: the build compiles each exercise file's reference
// version with exercise_file_marker.h force-included (CMakeLists.txt, the
// servelab_reference_<file> objects). The marker registers the file's path at
// start-up. Nothing else is compiled with it: a mutant is compiled from a
// scratch copy with the reference object's command less the marker's flags
// (tools/labkit/mutate.py), and does not register. A student's file, a planted bug's or a mutant's
// object is linked in place of the reference object, whose symbols are then already defined, so the
// linker never pulls the reference object (nor its marker) out of the archive. No registration
// means no fusion: the safe default.
#pragma once

#include <string_view>

namespace servelab {

// Records that the reference version of `path` (repository-relative, e.g.
// "kernels/cpu/rmsnorm.cpp", a string with static storage) is linked.
// Returns true, so that a marker can call it in a static initializer.
bool register_reference_exercise_file(std::string_view path);

// Whether the reference version of the exercise file `path` is linked into
// this binary (false for a file some lab, bug or mutant replaced, and for a
// path that is no exercise file at all).
bool reference_exercise_file_linked(std::string_view path);

}  // namespace servelab
