// exercise_file_marker.h — force-included into the reference build of each exercise file.
//
// Part of the lab framework (see exercise_files.h for why). CMakeLists.txt
// compiles the reference version of every exercise file with
//   -include reference/common/exercise_file_marker.h
//   -DSERVELAB_EXERCISE_FILE="kernels/cpu/rmsnorm.cpp"  (the repository path)
//   -DSERVELAB_EXERCISE_SOURCE="/abs/path/kernels/cpu/rmsnorm.cpp"
// and this header registers the path when the object is linked and loaded.
// __BASE_FILE__ is the source file the compiler was given: a copy of the
// file compiled elsewhere with the same flags (a mutant) does not match
// SERVELAB_EXERCISE_SOURCE and registers nothing.
#pragma once

#include <string_view>

#include "reference/common/exercise_files.h"

#if defined(SERVELAB_EXERCISE_FILE) && defined(SERVELAB_EXERCISE_SOURCE)
namespace servelab::exercise_file_marker {
namespace {
[[maybe_unused]] const bool kRegistered =
    std::string_view(__BASE_FILE__) == std::string_view(SERVELAB_EXERCISE_SOURCE) &&
    register_reference_exercise_file(SERVELAB_EXERCISE_FILE);
}  // namespace
}  // namespace servelab::exercise_file_marker
#endif
