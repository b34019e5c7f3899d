# labs/labs.cmake — one engine build per lab, its test binaries, its planted
# bugs, and the grader's self-tests. Included from the top CMakeLists.txt.
#
# For a lab folder labs/labNN_<name>/ (with a manifest.json) this builds:
#   servelab_labNN_core      the engine with the lab's student/ files in place of
#                            the matching reference files (everything else:
#                            reference objects, compiled once and shared)
#   servelab-labNN           the CLI on that engine: chat with your own code
#   labNN_tests              the lab's tests (manifest "test_sources") on it
#   labNN_tests_reference    the same tests on the reference engine
#   labNN_bug_<name>_tests   the same tests on the reference with one planted
#                            bug (tests/labs/labNN/<name>.patch, applied at build
#                            time by tools/labkit/planted_bugs.py), for the self-tests
#   labNN_throughput         when the manifest's throughput names a "program"
#                            (a source file with a main, e.g. tools/labkit/gemv_speed.cpp
#                            for Lab 8's kernels): that program on the lab's
#                            engine, and labNN_throughput_reference on the
#                            reference one; the grader runs it instead of the CLIs
# and registers the grader self-tests (label "grader"):
#   grade_labNN_reference_scores_100        the reference scores 100 on the tests (the
#                                           speed is not timed)
#   grade_labNN_skeleton_scores_0           the generated skeleton scores 0...
#   grade_labNN_skeleton_says_not_implemented  ...saying "not implemented" in every group
# and, timed, in make test-all only (label "slow"):
#   grade_labNN_reference_speed             the reference scores 100, speed included
#                                           (SKIPPED when the machine is too busy or
#                                           noisy to time)
#   grade_labNN_reference_throughput_ratio  the reference timed against itself gives a
#                                           ratio in [0.9, 1.1], or within 4.5 of the
#                                           grader's standard errors of 1 (SKIPPED
#                                           when busy)
#   grade_labNN_bug_<name>                  each planted bug alone loses points in the
#                                           group that should catch it, whose message
#                                           names the mistake
#
# A lab with a GPU track (manifest_cuda.json; its student/ folder holds .cu
# files) also gets, where CUDA is compiled (servelab_cuda exists):
#   labNN_cuda_tests           the manifest's tests on the reference engine with
#                              the student's .cu objects linked in front of it
#   labNN_cuda_tests_reference / labNN_cuda_tests_wrong   the same, reference /
#                              the cuda-track planted bugs of the lab at once
#                              (the first of each kernel file)
#   labNN_cuda_bug_<name>_tests   the same with one cuda-track planted bug
#   servelab-labNN-cuda        the CLI with the student's kernels
# and the same grader self-tests, named grade_labNN_cuda_* (one
# grade_labNN_cuda_bug_<name> per cuda-track bug), which report
# SKIPPED (grade.py exits 77) on a machine without a usable GPU. The CPU
# track builds ignore the .cu files, so it grades exactly as without them.
#
# A student release (SERVELAB_STUDENT_RELEASE, CMakeLists.txt) has no planted
# bugs and no grader self-tests: both are the instructor's (they quote or
# assume the solutions), and a self-test that the skeleton scores 0 would fail
# as soon as a student did the work.

find_package(Python3 COMPONENTS Interpreter)
set(SERVELAB_GRADER ${CMAKE_SOURCE_DIR}/tools/labkit/grade.py)
set(SERVELAB_PLANTER ${CMAKE_SOURCE_DIR}/tools/labkit/planted_bugs.py)

# An engine with `root`'s files in place of the exercise files they mirror.
function(servelab_engine_with_overrides name root)
  file(GLOB_RECURSE overrides CONFIGURE_DEPENDS ${root}/*.cpp)
  servelab_engine_library(${name} ${root} ${overrides})
endfunction()

# `test_objects`: a list of object expressions ($<TARGET_OBJECTS:...>).
function(servelab_lab_test_binary name test_objects engine)
  add_executable(${name} ${test_objects} $<TARGET_OBJECTS:servelab_test_main> ${ARGN})
  target_link_libraries(${name} PRIVATE ${engine} GTest::gmock GTest::gtest)
endfunction()

# The test source files a manifest lists, as absolute paths. An edited
# manifest configures the build again (a new test source must be linked).
function(servelab_manifest_test_sources out_var manifest_file)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${manifest_file})
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

# ---------------------------------------------------------------- planted bugs
# tools/labkit/planted_bugs.py reads tests/labs/labNN/*.patch into a CMake list; a
# new or edited patch re-runs it. Each bug's files are written at build time
# (a patch that no longer applies fails the build, naming its hunk).
set(SERVELAB_PLANTED_BUGS "")
if(SERVELAB_STUDENT_RELEASE)
  # None in a student release.
elseif(Python3_Interpreter_FOUND)
  file(GLOB SERVELAB_BUG_PATCHES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/labs/lab*/*.patch)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${SERVELAB_BUG_PATCHES} ${SERVELAB_PLANTER})
  execute_process(
    COMMAND ${Python3_EXECUTABLE} ${SERVELAB_PLANTER} cmake ${CMAKE_BINARY_DIR}/planted_bugs.cmake
    RESULT_VARIABLE planted_bugs_rc ERROR_VARIABLE planted_bugs_error)
  if(NOT planted_bugs_rc EQUAL 0)
    message(FATAL_ERROR "tools/labkit/planted_bugs.py could not read the planted bugs:\n${planted_bugs_error}")
  endif()
  include(${CMAKE_BINARY_DIR}/planted_bugs.cmake)
else()
  message(STATUS "servelab: no Python 3 interpreter; the planted-bug builds and self-tests are skipped")
endif()

# The generated files of one bug, as absolute paths; adds the command that writes them.
function(servelab_planted_bug_sources out_var bug)
  set(key SERVELAB_BUG_${bug})
  set(out_dir ${CMAKE_BINARY_DIR}/planted_bugs/${${key}_LAB}/${${key}_NAME})
  set(outputs "")
  set(references "")
  foreach(path ${${key}_FILES})
    list(APPEND outputs ${out_dir}/${path})
    list(APPEND references ${CMAKE_SOURCE_DIR}/${path})
  endforeach()
  add_custom_command(OUTPUT ${outputs}
    COMMAND ${Python3_EXECUTABLE} ${SERVELAB_PLANTER} apply ${${key}_PATCH} ${out_dir}
    DEPENDS ${${key}_PATCH} ${references} ${SERVELAB_PLANTER}
    COMMENT "Planting ${${key}_LAB}/${${key}_NAME}"
    VERBATIM)
  set(${out_var} ${outputs} PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- GPU track
# `root`'s .cu files (mirroring kernels/cuda/ paths), compiled as objects
# like servelab_cuda's. They go on the link line as objects, ahead of the
# engine's archives, so they — not servelab_cuda's reference versions — define
# the kernels, whoever calls them (a test or the engine); a reference object
# is then never pulled from the archive (if it were, the link would fail with
# a duplicate symbol, never pick silently).
function(servelab_cuda_overrides name)
  add_library(${name} OBJECT ${ARGN})
  target_link_libraries(${name} PRIVATE servelab_cuda)
  target_compile_options(${name} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:--Werror all-warnings>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>")
endfunction()

function(servelab_cuda_test_binary name test_objects)
  add_executable(${name} $<TARGET_OBJECTS:${test_objects}> $<TARGET_OBJECTS:servelab_test_main>)
  foreach(overrides ${ARGN})
    target_sources(${name} PRIVATE $<TARGET_OBJECTS:${overrides}>)
  endforeach()
  target_link_libraries(${name} PRIVATE servelab_core GTest::gmock GTest::gtest)
endfunction()

# A lab's GPU track: its binaries and, with Python, its grader self-tests.
function(servelab_lab_cuda_track lab lab_dir lab_number)
  servelab_manifest_test_sources(test_sources ${lab_dir}/manifest_cuda.json)
  add_library(${lab}_cuda_test_objects OBJECT ${test_sources})
  target_link_libraries(${lab}_cuda_test_objects PRIVATE servelab_settings servelab_cuda
                                                         GTest::gmock GTest::gtest)
  target_compile_definitions(${lab}_cuda_test_objects PRIVATE
                             SERVELAB_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  file(GLOB_RECURSE student_kernels CONFIGURE_DEPENDS ${lab_dir}/student/*.cu)
  foreach(file ${student_kernels})
    string(REPLACE "${lab_dir}/student/" "${CMAKE_SOURCE_DIR}/" reference_file ${file})
    if(NOT EXISTS ${reference_file})
      message(FATAL_ERROR "${file} replaces ${reference_file}, which does not exist")
    endif()
  endforeach()
  servelab_cuda_overrides(${lab}_cuda_student_kernels ${student_kernels})
  servelab_cuda_test_binary(${lab}_cuda_tests ${lab}_cuda_test_objects ${lab}_cuda_student_kernels)
  servelab_cuda_test_binary(${lab}_cuda_tests_reference ${lab}_cuda_test_objects)
  add_executable(servelab-${lab}-cuda $<TARGET_OBJECTS:servelab_cli>
                                      $<TARGET_OBJECTS:${lab}_cuda_student_kernels>)
  target_link_libraries(servelab-${lab}-cuda PRIVATE servelab_core CLI11::CLI11)
  # Each cuda-track bug alone (labNN_cuda_bug_<name>_tests), and the lab's
  # cuda-track bugs at once: the first bug of each kernel file (two bugs in
  # one file cannot be linked together; both are still graded alone).
  set(wrong_kernels "")
  set(wrong_files "")
  set(cuda_bugs "")
  foreach(bug ${SERVELAB_PLANTED_BUGS})
    if(SERVELAB_BUG_${bug}_LAB STREQUAL lab AND SERVELAB_BUG_${bug}_TRACK STREQUAL "cuda")
      servelab_planted_bug_sources(bug_sources ${bug})
      set(bug_name ${SERVELAB_BUG_${bug}_NAME})
      servelab_cuda_overrides(${lab}_cuda_bug_${bug_name}_kernels ${bug_sources})
      servelab_cuda_test_binary(${lab}_cuda_bug_${bug_name}_tests ${lab}_cuda_test_objects
                                ${lab}_cuda_bug_${bug_name}_kernels)
      list(APPEND cuda_bugs ${bug_name})
      set(shares_a_file FALSE)
      foreach(path ${SERVELAB_BUG_${bug}_FILES})
        if(path IN_LIST wrong_files)
          set(shares_a_file TRUE)
        endif()
      endforeach()
      if(NOT shares_a_file)
        list(APPEND wrong_kernels ${bug_sources})
        list(APPEND wrong_files ${SERVELAB_BUG_${bug}_FILES})
      endif()
    endif()
  endforeach()
  if(wrong_kernels)
    servelab_cuda_overrides(${lab}_cuda_wrong_kernels ${wrong_kernels})
    servelab_cuda_test_binary(${lab}_cuda_tests_wrong ${lab}_cuda_test_objects
                              ${lab}_cuda_wrong_kernels)
  endif()
  if(NOT Python3_Interpreter_FOUND OR SERVELAB_STUDENT_RELEASE)
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
  # Each bug alone: its group loses points and its output names the mistake.
  foreach(bug_name ${cuda_bugs})
    add_test(NAME ${prefix}_bug_${bug_name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/grade_planted_bug.py
              --lab ${lab_number} --bug ${bug_name}
              --student-tests $<TARGET_FILE:${lab}_cuda_bug_${bug_name}_tests>
              --out ${CMAKE_BINARY_DIR}/${prefix}_bug_${bug_name}.json)
    list(APPEND tests ${prefix}_bug_${bug_name})
  endforeach()
  # 77: grade.py could not run the track here (no usable GPU); ctest says SKIPPED.
  set_tests_properties(${tests} PROPERTIES
    LABELS "grader;cuda" TIMEOUT 600 RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
endfunction()

# ---------------------------------------------------------------- the labs
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

  # Tests: the objects servelab_tests is linked from (each test file is
  # compiled once, CMakeLists.txt), linked against each engine.
  servelab_manifest_test_sources(test_sources ${lab_dir}/manifest.json)
  set(lab_test_objects "")
  foreach(test_source ${test_sources})
    get_filename_component(test_file_name ${test_source} NAME_WE)
    if(NOT TARGET servelab_unit_${test_file_name})
      message(FATAL_ERROR "${lab_dir}/manifest.json: ${test_source} is not a test of tests/unit/ "
                          "or tests/hidden/")
    endif()
    list(APPEND lab_test_objects $<TARGET_OBJECTS:servelab_unit_${test_file_name}>)
  endforeach()
  servelab_lab_test_binary(${lab}_tests "${lab_test_objects}" servelab_${lab}_core)
  servelab_lab_test_binary(${lab}_tests_reference "${lab_test_objects}" servelab_core)

  # One test binary per planted bug: the bug's files are compiled into the
  # executable, so they come before servelab_core on the link line and the
  # archive's reference versions of those files are never pulled in.
  set(lab_bugs "")
  foreach(bug ${SERVELAB_PLANTED_BUGS})
    if(SERVELAB_BUG_${bug}_LAB STREQUAL lab AND SERVELAB_BUG_${bug}_TRACK STREQUAL "cpu")
      servelab_planted_bug_sources(bug_sources ${bug})
      servelab_lab_test_binary(${lab}_bug_${SERVELAB_BUG_${bug}_NAME}_tests "${lab_test_objects}"
                               servelab_core ${bug_sources})
      list(APPEND lab_bugs ${SERVELAB_BUG_${bug}_NAME})
    endif()
  endforeach()

  # A throughput program (Lab 8): it times the student's kernel against a
  # reference kernel itself. The self-tests run the reference build's, with
  # the reference solution as its baseline: the same kernel on both sides.
  file(READ ${lab_dir}/manifest.json manifest)
  string(JSON throughput_program ERROR_VARIABLE no_throughput_program
         GET ${manifest} throughput program)
  set(program_args "")
  if(NOT no_throughput_program)
    foreach(engine_suffix IN ITEMS "" _reference)
      set(engine servelab_${lab}_core)
      if(engine_suffix)
        set(engine servelab_core)
      endif()
      add_executable(${lab}_throughput${engine_suffix} ${CMAKE_SOURCE_DIR}/${throughput_program})
      target_link_libraries(${lab}_throughput${engine_suffix} PRIVATE ${engine})
    endforeach()
    set(program_args --student-program $<TARGET_FILE:${lab}_throughput_reference>
                     --program-arg=--baseline=step4)
  endif()
  if(TARGET servelab_cuda AND EXISTS ${lab_dir}/manifest_cuda.json)
    servelab_lab_cuda_track(${lab} ${lab_dir} ${lab_number})
  endif()

  if(NOT Python3_Interpreter_FOUND OR SERVELAB_STUDENT_RELEASE)
    continue()
  endif()
  # Grader self-tests. Each writes its results.json under the build folder.
  set(grade ${Python3_EXECUTABLE} ${SERVELAB_GRADER} --lab ${lab_number} --no-build
            --build-dir ${CMAKE_BINARY_DIR} --reference-cli $<TARGET_FILE:servelab>)
  # The reference passes every test group (the speed is not timed here).
  add_test(NAME grade_${lab}_reference_scores_100
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests_reference>
            --student-cli $<TARGET_FILE:servelab>
            --out ${CMAKE_BINARY_DIR}/grade_${lab}_reference_tests.json
            --min-score 100 --skip-throughput)
  add_test(NAME grade_${lab}_skeleton_scores_0
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests>
            --student-cli $<TARGET_FILE:servelab-${lab}> --out ${CMAKE_BINARY_DIR}/grade_${lab}_skeleton.json
            --max-score 0)
  add_test(NAME grade_${lab}_skeleton_says_not_implemented
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/check_grade.py
            --skeleton ${CMAKE_BINARY_DIR}/grade_${lab}_skeleton.json)
  set_tests_properties(grade_${lab}_skeleton_says_not_implemented PROPERTIES
    DEPENDS grade_${lab}_skeleton_scores_0)
  # The speed self-test times the reference against itself: a timing test,
  # so it is in make test-all only (label "slow"), and it runs alone
  # (RUN_SERIAL). From 4 to 6 timed rounds (a student's grade takes the
  # manifest's repetitions, up to 4 x them, until a 2 % standard error): any
  # ratio needs two rounds of each order to measure its noise, and the
  # self-test stops at the 3.5 % that is still graded (check_grade.py widens
  # its band to match). A noisier machine gives up after 6 rounds: SKIPPED
  # (77; tools/labkit/grade.py says why). On the 2-core course machine rounds vary
  # by 3-10 % (Lab 7's three ranks on two cores by about 8.5 %), and most
  # labs end SKIPPED; a quiet machine with cores to spare grades them.
  add_test(NAME grade_${lab}_reference_speed
    COMMAND ${grade} --student-tests $<TARGET_FILE:${lab}_tests_reference>
            --student-cli $<TARGET_FILE:servelab> --out ${CMAKE_BINARY_DIR}/grade_${lab}_reference.json
            --min-score 100 --skip-if-busy --repetitions 4 --max-rounds 6
            --target-error 3.5 ${program_args})
  add_test(NAME grade_${lab}_reference_throughput_ratio
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/check_grade.py
            ${CMAKE_BINARY_DIR}/grade_${lab}_reference.json --ratio-between 0.9 1.1)
  set_tests_properties(grade_${lab}_reference_throughput_ratio PROPERTIES
    DEPENDS grade_${lab}_reference_speed)
  set_tests_properties(grade_${lab}_reference_speed PROPERTIES RUN_SERIAL TRUE)
  set_tests_properties(grade_${lab}_reference_speed grade_${lab}_reference_throughput_ratio
    PROPERTIES LABELS "grader;slow" TIMEOUT 600 SKIP_RETURN_CODE 77)
  set(lab_grade_tests grade_${lab}_reference_scores_100 grade_${lab}_skeleton_scores_0
      grade_${lab}_skeleton_says_not_implemented)
  foreach(bug_name ${lab_bugs})
    add_test(NAME grade_${lab}_bug_${bug_name}
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/grade_planted_bug.py
              --lab ${lab_number} --bug ${bug_name}
              --student-tests $<TARGET_FILE:${lab}_bug_${bug_name}_tests>
              --out ${CMAKE_BINARY_DIR}/grade_${lab}_bug_${bug_name}.json)
    list(APPEND lab_grade_tests grade_${lab}_bug_${bug_name})
  endforeach()
  set_tests_properties(${lab_grade_tests} PROPERTIES
    LABELS "grader" TIMEOUT 600 SKIP_RETURN_CODE 77)
endforeach()

if(Python3_Interpreter_FOUND AND NOT SERVELAB_STUDENT_RELEASE)
  add_test(NAME planted_bugs_apply
    COMMAND ${Python3_EXECUTABLE} ${SERVELAB_PLANTER} check)
  set_tests_properties(planted_bugs_apply PROPERTIES LABELS "labs" TIMEOUT 60)
  # Mutation testing (tools/labkit/mutate.py): one mutant of every lab's solution
  # must be caught by its tests (make test), and the full run, every
  # mutant of every lab, is a slow test (make test-all: several minutes).
  add_test(NAME mutation_smoke
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/labkit/mutate.py --smoke 1 --jobs 1
            --no-build --build-dir ${CMAKE_BINARY_DIR} --out ${CMAKE_BINARY_DIR}/mutation_smoke)
  set_tests_properties(mutation_smoke PROPERTIES LABELS "labs" TIMEOUT 600)
  add_test(NAME mutation_full
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/labkit/mutate.py --jobs 2 --min-score 90
            --no-build --build-dir ${CMAKE_BINARY_DIR})
  set_tests_properties(mutation_full PROPERTIES LABELS "labs;slow" TIMEOUT 3600 RUN_SERIAL TRUE)
  add_test(NAME mutate_selftest
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/tools/test_mutate.py)
  set_tests_properties(mutate_selftest PROPERTIES LABELS "tools" TIMEOUT 60
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()
