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
# and registers the grader self-tests: reference = 100%, skeleton = 0%,
# known-wrong < 50%, reference-vs-reference throughput ratio in [0.85, 1.15].

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
  file(READ ${lab_dir}/manifest.json manifest)
  string(JSON num_sources LENGTH ${manifest} test_sources)
  math(EXPR last_source "${num_sources} - 1")
  set(test_sources "")
  foreach(i RANGE ${last_source})
    string(JSON source GET ${manifest} test_sources ${i})
    list(APPEND test_sources ${CMAKE_SOURCE_DIR}/${source})
  endforeach()
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

  if(NOT Python3_Interpreter_FOUND)
    continue()
  endif()
  # Grader self-tests. Each writes its results.json under the build folder.
  set(grade ${Python3_EXECUTABLE} ${SERVELAB_GRADER} --lab ${lab_number} --no-build
            --build-dir ${CMAKE_BINARY_DIR} --reference-cli $<TARGET_FILE:servelab>)
  add_test(NAME grade_${lab}_reference_scores_100
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests_reference>
            --student-cli $<TARGET_FILE:servelab> --out ${CMAKE_BINARY_DIR}/grade_${lab}_reference.json
            --min-score 100)
  add_test(NAME grade_${lab}_skeleton_scores_0
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests>
            --student-cli $<TARGET_FILE:servelab-${lab}> --out ${CMAKE_BINARY_DIR}/grade_${lab}_skeleton.json
            --max-score 0)
  add_test(NAME grade_${lab}_reference_throughput_ratio
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/check_grade.py
            ${CMAKE_BINARY_DIR}/grade_${lab}_reference.json --ratio-between 0.85 1.15
            --skeleton ${CMAKE_BINARY_DIR}/grade_${lab}_skeleton.json)
  set_tests_properties(grade_${lab}_reference_throughput_ratio PROPERTIES
    DEPENDS "grade_${lab}_reference_scores_100;grade_${lab}_skeleton_scores_0")
  set(lab_grade_tests grade_${lab}_reference_scores_100 grade_${lab}_skeleton_scores_0
      grade_${lab}_reference_throughput_ratio)
  if(TARGET ${lab}_tests_wrong)
    add_test(NAME grade_${lab}_known_wrong_scores_below_50
      COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests_wrong>
              --student-cli $<TARGET_FILE:servelab> --out ${CMAKE_BINARY_DIR}/grade_${lab}_wrong.json
              --max-score 49.99)
    list(APPEND lab_grade_tests grade_${lab}_known_wrong_scores_below_50)
  endif()
  # Throughput cases are timed: run them one at a time (RUN_SERIAL), two threads each.
  set_tests_properties(${lab_grade_tests} PROPERTIES
    LABELS "grader" TIMEOUT 600 RUN_SERIAL TRUE ENVIRONMENT "OMP_NUM_THREADS=2")
endforeach()
