// exercise_file_marker.h — force-included into the reference build of each exercise file.
//
// Part of the lab framework (see exercise_files.h for why). CMakeLists.txt
// compiles the reference version of every exercise file, and only that, with
//   -include reference/common/exercise_file_marker.h
//   -DSERVELAB_EXERCISE_FILE="kernels/cpu/rmsnorm.cpp"  (the repository path)
// and this header registers the path when the object is linked and loaded.
// A copy of the file compiled elsewhere (a mutant of tools/labkit/mutate.py) is
// compiled without these two flags, so it registers nothing. (The source's
// own name cannot tell: clang's __BASE_FILE__ in a force-included header is
// "<built-in>", not the file being compiled.)
#pragma once

#include <string_view>

#include "reference/common/exercise_files.h"

#if defined(SERVELAB_EXERCISE_FILE)
namespace servelab::exercise_file_marker {
namespace {
[[maybe_unused]] const bool kRegistered = register_reference_exercise_file(SERVELAB_EXERCISE_FILE);
}  // namespace
}  // namespace servelab::exercise_file_marker
#endif
