# labs/labs.cmake — one engine build per lab, its test binaries, and the
# grader's self-tests. Included from the top CMakeLists.txt.
#
# For a lab folder labs/labNN_<name>/ (with a manifest.json) this builds:
#   servelab_labNN_core      the engine with the lab's student/ files in place of
#                            the matching reference files (everything else:
#                            reference, shared objects from servelab_common)
#   servelab-labNN           the CLI on that engine: chat with your own code
#   labNN_tests              the lab's tests (manifest "test_sources") on it
#   labNN_tests_reference    the same tests on the reference engine
#   labNN_tests_wrong        the same tests on a known-wrong implementation
#                            (tests/labs/labNN_wrong/<path>), for self-tests
#   labNN_throughput         when the manifest's throughput names a "program"
#                            (a source file with a main, e.g. tools/gemv_speed.cpp
#                            for Lab 8's kernels): that program on the lab's
#                            engine, and labNN_throughput_reference on the
#                            reference one; the grader runs it instead of the CLIs
# and registers the grader self-tests: reference = 100%, skeleton = 0%,
# known-wrong < 50%, reference-vs-reference throughput ratio in [0.85, 1.15]
# (with a throughput program: reference solution vs reference kernel, [0.85, 1.5]).
#
# A lab with a GPU track (manifest_cuda.json; its student/ folder holds .cu
# files) also gets, where CUDA is compiled (servelab_cuda exists):
#   labNN_cuda_tests           the manifest's tests on the reference engine with
#                              the student's .cu objects linked in front of it
#   labNN_cuda_tests_reference / labNN_cuda_tests_wrong   the same, reference /
#                              tests/labs/labNN_wrong/**/*.cu
#   servelab-labNN-cuda        the CLI with the student's kernels
# and the same grader self-tests, named grade_labNN_cuda_*, which report
# SKIPPED (grade.py exits 77) on a machine without a usable GPU. The CPU
# track builds ignore the .cu files, so it grades exactly as without them.

# The reference files that `overrides` (files under some root, mirroring
# repository paths) replace; `root` is stripped to get the reference path.
function(servelab_replaced_sources out_var root)
  set(replaced "")
  foreach(file ${ARGN})
    string(REPLACE "${root}/" "${CMAKE_SOURCE_DIR}/" reference_file ${file})
    list(APPEND replaced ${reference_file})
  endforeach()
  set(${out_var} ${replaced} PARENT_SCOPE)
endfunction()

# An engine with `root`'s files in place of the exercise files they mirror.
function(servelab_engine_with_overrides name root)
  file(GLOB_RECURSE overrides CONFIGURE_DEPENDS ${root}/*.cpp)
  servelab_replaced_sources(replaced ${root} ${overrides})
  set(kept ${SERVELAB_EXERCISE_SOURCES})
  if(replaced)
    list(REMOVE_ITEM kept ${replaced})
  endif()
  servelab_engine_library(${name} ${overrides} ${kept})
endfunction()

function(servelab_lab_test_binary name test_objects engine)
  add_executable(${name} $<TARGET_OBJECTS:${test_objects}>)
  target_link_libraries(${name} PRIVATE ${engine} GTest::gmock GTest::gtest GTest::gtest_main)
endfunction()

# The test source files a manifest lists, as absolute paths.
function(servelab_manifest_test_sources out_var manifest_file)
  file(READ ${manifest_file} manifest)
  string(JSON num_sources LENGTH ${manifest} test_sources)
  math(EXPR last_source "${num_sources} - 1")
  set(sources "")
  foreach(i RANGE ${last_source})
    string(JSON source GET ${manifest} test_sources ${i})
    list(APPEND sources ${CMAKE_SOURCE_DIR}/${source})
  endforeach()
  set(${out_var} ${sources} PARENT_SCOPE)
endfunction()

# `root`'s .cu files (mirroring kernels/cuda/ paths), compiled as objects
# like servelab_cuda's. They go on the link line as objects, ahead of the
# engine's archives, so they — not servelab_cuda's reference versions — define
# the kernels, whoever calls them (a test or the engine); a reference object
# is then never pulled from the archive (if it were, the link would fail with
# a duplicate symbol, never pick silently).
function(servelab_cuda_overrides name root)
  file(GLOB_RECURSE overrides CONFIGURE_DEPENDS ${root}/*.cu)
  servelab_replaced_sources(replaced ${root} ${overrides})
  foreach(file ${replaced})
    if(NOT EXISTS ${file})
      message(FATAL_ERROR "${root}: a .cu file that replaces ${file}, which does not exist")
    endif()
  endforeach()
  add_library(${name} OBJECT ${overrides})
  target_link_libraries(${name} PRIVATE servelab_cuda)
  target_compile_options(${name} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:--Werror all-warnings>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>")
endfunction()

function(servelab_cuda_test_binary name test_objects)
  add_executable(${name} $<TARGET_OBJECTS:${test_objects}>)
  foreach(overrides ${ARGN})
    target_sources(${name} PRIVATE $<TARGET_OBJECTS:${overrides}>)
  endforeach()
  target_link_libraries(${name} PRIVATE servelab_core GTest::gmock GTest::gtest GTest::gtest_main)
endfunction()

# A lab's GPU track: its binaries and, with Python, its grader self-tests.
function(servelab_lab_cuda_track lab lab_dir lab_number)
  servelab_manifest_test_sources(test_sources ${lab_dir}/manifest_cuda.json)
  add_library(${lab}_cuda_test_objects OBJECT ${test_sources})
  target_link_libraries(${lab}_cuda_test_objects PRIVATE servelab_common servelab_cuda
                                                         GTest::gmock GTest::gtest)
  target_compile_definitions(${lab}_cuda_test_objects PRIVATE
                             SERVELAB_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  servelab_cuda_overrides(${lab}_cuda_student_kernels ${lab_dir}/student)
  servelab_cuda_test_binary(${lab}_cuda_tests ${lab}_cuda_test_objects ${lab}_cuda_student_kernels)
  servelab_cuda_test_binary(${lab}_cuda_tests_reference ${lab}_cuda_test_objects)
  add_executable(servelab-${lab}-cuda $<TARGET_OBJECTS:servelab_cli>
                                      $<TARGET_OBJECTS:${lab}_cuda_student_kernels>)
  target_link_libraries(servelab-${lab}-cuda PRIVATE servelab_core CLI11::CLI11)
  set(wrong_root ${CMAKE_SOURCE_DIR}/tests/labs/${lab}_wrong)
  file(GLOB_RECURSE wrong_kernels ${wrong_root}/*.cu)
  if(wrong_kernels)
    servelab_cuda_overrides(${lab}_cuda_wrong_kernels ${wrong_root})
    servelab_cuda_test_binary(${lab}_cuda_tests_wrong ${lab}_cuda_test_objects
                              ${lab}_cuda_wrong_kernels)
  endif()
  if(NOT Python3_Interpreter_FOUND)
    return()
  endif()
  set(grade ${Python3_EXECUTABLE} ${SERVELAB_GRADER} --lab ${lab_number} --track cuda --no-build
            --build-dir ${CMAKE_BINARY_DIR})
  set(prefix grade_${lab}_cuda)
  add_test(NAME ${prefix}_reference_scores_100
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_cuda_tests_reference>
            --out ${CMAKE_BINARY_DIR}/${prefix}_reference.json --min-score 100)
  add_test(NAME ${prefix}_skeleton_scores_0
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_cuda_tests>
            --out ${CMAKE_BINARY_DIR}/${prefix}_skeleton.json --max-score 0)
  set(tests ${prefix}_reference_scores_100 ${prefix}_skeleton_scores_0)
  if(TARGET ${lab}_cuda_tests_wrong)
    add_test(NAME ${prefix}_known_wrong_scores_below_50
      COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_cuda_tests_wrong>
              --out ${CMAKE_BINARY_DIR}/${prefix}_wrong.json --max-score 49.99)
    list(APPEND tests ${prefix}_known_wrong_scores_below_50)
  endif()
  # 77: grade.py could not run the track here (no usable GPU); ctest says SKIPPED.
  set_tests_properties(${tests} PROPERTIES
    LABELS "grader;cuda" TIMEOUT 600 RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
endfunction()

find_package(Python3 COMPONENTS Interpreter)
set(SERVELAB_GRADER ${CMAKE_SOURCE_DIR}/tools/grade.py)

file(GLOB SERVELAB_LAB_DIRS LIST_DIRECTORIES true ${CMAKE_SOURCE_DIR}/labs/lab[0-9][0-9]_*)
foreach(lab_dir ${SERVELAB_LAB_DIRS})
  if(NOT EXISTS ${lab_dir}/manifest.json)
    continue()
  endif()
  get_filename_component(lab_folder ${lab_dir} NAME)  # e.g. lab01_naive_decoding
  string(SUBSTRING ${lab_folder} 0 5 lab)              # e.g. lab01
  string(SUBSTRING ${lab_folder} 3 2 lab_number)

  # Engines and CLI.
  servelab_engine_with_overrides(servelab_${lab}_core ${lab_dir}/student)
  add_executable(servelab-${lab} $<TARGET_OBJECTS:servelab_cli>)
  target_link_libraries(servelab-${lab} PRIVATE servelab_${lab}_core CLI11::CLI11)

  # Tests, compiled once and linked against each engine.
  servelab_manifest_test_sources(test_sources ${lab_dir}/manifest.json)
  add_library(${lab}_test_objects OBJECT ${test_sources})
  target_link_libraries(${lab}_test_objects PRIVATE servelab_common GTest::gmock GTest::gtest)
  target_compile_definitions(${lab}_test_objects PRIVATE SERVELAB_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  servelab_lab_test_binary(${lab}_tests ${lab}_test_objects servelab_${lab}_core)
  servelab_lab_test_binary(${lab}_tests_reference ${lab}_test_objects servelab_core)
  set(wrong_root ${CMAKE_SOURCE_DIR}/tests/labs/${lab}_wrong)
  if(EXISTS ${wrong_root})
    servelab_engine_with_overrides(servelab_${lab}_wrong_core ${wrong_root})
    servelab_lab_test_binary(${lab}_tests_wrong ${lab}_test_objects servelab_${lab}_wrong_core)
  endif()
  # A throughput program (Lab 8): it times the student's kernel against a
  # reference kernel itself; the self-tests below run the reference build's.
  file(READ ${lab_dir}/manifest.json manifest)
  string(JSON throughput_program ERROR_VARIABLE no_throughput_program
         GET ${manifest} throughput program)
  set(program_args "")
  set(ratio_high 1.15)
  if(NOT no_throughput_program)
    foreach(engine_suffix IN ITEMS "" _reference)
      set(engine servelab_${lab}_core)
      if(engine_suffix)
        set(engine servelab_core)
      endif()
      add_executable(${lab}_throughput${engine_suffix} ${CMAKE_SOURCE_DIR}/${throughput_program})
      target_link_libraries(${lab}_throughput${engine_suffix} PRIVATE ${engine})
    endforeach()
    set(program_args --student-program $<TARGET_FILE:${lab}_throughput_reference>)
    # Its ratio is the reference solution against a production kernel, not
    # against itself: on par or faster (Lab 8's step 4 shares x across 4 rows).
    set(ratio_high 1.5)
  endif()
  if(TARGET servelab_cuda AND EXISTS ${lab_dir}/manifest_cuda.json)
    servelab_lab_cuda_track(${lab} ${lab_dir} ${lab_number})
  endif()

  if(NOT Python3_Interpreter_FOUND)
    continue()
  endif()
  # Grader self-tests. Each writes its results.json under the build folder.
  set(grade ${Python3_EXECUTABLE} ${SERVELAB_GRADER} --lab ${lab_number} --no-build
            --build-dir ${CMAKE_BINARY_DIR} --reference-cli $<TARGET_FILE:servelab>)
  add_test(NAME grade_${lab}_reference_scores_100
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests_reference>
            --student-cli $<TARGET_FILE:servelab> --out ${CMAKE_BINARY_DIR}/grade_${lab}_reference.json
            --min-score 100 ${program_args})
  add_test(NAME grade_${lab}_skeleton_scores_0
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests>
            --student-cli $<TARGET_FILE:servelab-${lab}> --out ${CMAKE_BINARY_DIR}/grade_${lab}_skeleton.json
            --max-score 0)
  add_test(NAME grade_${lab}_reference_throughput_ratio
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/check_grade.py
            ${CMAKE_BINARY_DIR}/grade_${lab}_reference.json --ratio-between 0.85 ${ratio_high}
            --skeleton ${CMAKE_BINARY_DIR}/grade_${lab}_skeleton.json)
  set_tests_properties(grade_${lab}_reference_throughput_ratio PROPERTIES
    DEPENDS "grade_${lab}_reference_scores_100;grade_${lab}_skeleton_scores_0")
  set(lab_grade_tests grade_${lab}_reference_scores_100 grade_${lab}_skeleton_scores_0
      grade_${lab}_reference_throughput_ratio)
  if(TARGET ${lab}_tests_wrong)
    add_test(NAME grade_${lab}_known_wrong_scores_below_50
      COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests_wrong>
              --student-cli $<TARGET_FILE:servelab> --out ${CMAKE_BINARY_DIR}/grade_${lab}_wrong.json
              --max-score 49.99 ${program_args})
    list(APPEND lab_grade_tests grade_${lab}_known_wrong_scores_below_50)
  endif()
  # Throughput cases are timed: run them one at a time (RUN_SERIAL), two threads each.
  set_tests_properties(${lab_grade_tests} PROPERTIES
    LABELS "grader" TIMEOUT 600 RUN_SERIAL TRUE ENVIRONMENT "OMP_NUM_THREADS=2")
endforeach()
