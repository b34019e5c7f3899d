# tools/gpu_check/lab_tracks.cmake — the labs' GPU tracks, built for the GPU machine.
#
# Part of the CUDA backend's checks (issue 48). labs/labs.cmake builds each
# GPU track in the main build, which the GPU machine cannot configure (no
# spdlog, CLI11, ...), so its grader self-tests had never run on a GPU. This
# builds the same three test binaries per lab from this project's engine
# (servelab_engine, servelab_cuda_kernels), the same way:
#   labNN_cuda_tests            the manifest's test sources with the lab's
#                               student/*.cu objects linked in front of the
#                               kernels' archive (the skeleton: scores 0)
#   labNN_cuda_tests_reference  the same tests on the reference kernels (100)
#   labNN_cuda_tests_wrong      every cuda-track planted bug of the lab at once
#                               (tests/labs/labNN/*.patch, Track: cuda; below 50)
# The target gpu_check_labNN_track builds one lab's, gpu_check_lab_tracks all
# (a lab whose kernels do not compile then costs only its own self-tests). tools/gpu_check.sh
# (step labs) then runs tools/labkit/grade.py --track cuda on each, with the
# thresholds of labs/labs.cmake's grade_labNN_cuda_* tests.
find_package(Python3 COMPONENTS Interpreter)
add_custom_target(gpu_check_lab_tracks)
set(lab_test_main ${SERVELAB_ROOT}/tests/common/test_main.cpp)
# GoogleTest built from its sources names its targets gtest and gmock; an
# installed one, GTest::gtest and GTest::gmock.
set(lab_gtest gmock gtest)
if(TARGET GTest::gmock)
  set(lab_gtest GTest::gmock GTest::gtest)
endif()

# The planted bugs, as labs/labs.cmake reads them (Python standard library only).
# A student release has none, and no grader self-tests: no lab tracks here.
set(SERVELAB_PLANTED_BUGS "")
set(planter ${SERVELAB_ROOT}/tools/labkit/planted_bugs.py)
if(NOT EXISTS ${planter})
  return()
endif()
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} ${planter} cmake ${CMAKE_BINARY_DIR}/planted_bugs.cmake
                  RESULT_VARIABLE planted_bugs_rc ERROR_VARIABLE planted_bugs_error)
  if(planted_bugs_rc EQUAL 0)
    include(${CMAKE_BINARY_DIR}/planted_bugs.cmake)
  else()
    message(WARNING "gpu_check: planted_bugs.py failed, no known-wrong binaries:\n${planted_bugs_error}")
  endif()
endif()

# One lab's test binary: the test objects, the test main, the kernel overrides.
function(gpu_check_lab_binary lab name test_objects)
  add_executable(${name} $<TARGET_OBJECTS:${test_objects}> ${lab_test_main} ${ARGN})
  target_link_libraries(${name} PRIVATE servelab_engine ${lab_gtest})
  add_dependencies(gpu_check_${lab}_track ${name})
endfunction()

# `files`' .cu objects, compiled as the kernels are (warnings are errors).
function(gpu_check_kernel_overrides name)
  add_library(${name} OBJECT ${ARGN})
  target_link_libraries(${name} PRIVATE servelab_cuda_kernels)
  target_compile_options(${name} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:--Werror all-warnings>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>")
endfunction()

# A bug's patched files, written at build time as the main build writes them.
function(gpu_check_bug_sources out_var bug)
  set(key SERVELAB_BUG_${bug})
  set(out_dir ${CMAKE_BINARY_DIR}/planted_bugs/${${key}_LAB}/${${key}_NAME})
  set(outputs "")
  foreach(path ${${key}_FILES})
    list(APPEND outputs ${out_dir}/${path})
  endforeach()
  add_custom_command(OUTPUT ${outputs}
    COMMAND ${Python3_EXECUTABLE} ${planter} apply ${${key}_PATCH} ${out_dir}
    DEPENDS ${${key}_PATCH} ${planter}
    COMMENT "Planting ${${key}_LAB}/${${key}_NAME}")
  set(${out_var} ${outputs} PARENT_SCOPE)
endfunction()

function(gpu_check_lab_track lab_dir)
  get_filename_component(lab_folder ${lab_dir} NAME)  # e.g. lab01_naive_decoding
  string(SUBSTRING ${lab_folder} 0 5 lab)              # e.g. lab01
  add_custom_target(gpu_check_${lab}_track)
  add_dependencies(gpu_check_lab_tracks gpu_check_${lab}_track)
  file(READ ${lab_dir}/manifest_cuda.json manifest)
  string(JSON num_sources LENGTH ${manifest} test_sources)
  math(EXPR last_source "${num_sources} - 1")
  set(test_sources "")
  foreach(i RANGE ${last_source})
    string(JSON source GET ${manifest} test_sources ${i})
    list(APPEND test_sources ${SERVELAB_ROOT}/${source})
  endforeach()
  add_library(${lab}_cuda_test_objects OBJECT ${test_sources})
  target_link_libraries(${lab}_cuda_test_objects PRIVATE servelab_engine ${lab_gtest})

  file(GLOB_RECURSE student_kernels ${lab_dir}/student/*.cu)
  gpu_check_kernel_overrides(${lab}_cuda_student_kernels ${student_kernels})
  gpu_check_lab_binary(${lab} ${lab}_cuda_tests ${lab}_cuda_test_objects
                       $<TARGET_OBJECTS:${lab}_cuda_student_kernels>)
  gpu_check_lab_binary(${lab} ${lab}_cuda_tests_reference ${lab}_cuda_test_objects)
  set(wrong_kernels "")
  foreach(bug ${SERVELAB_PLANTED_BUGS})
    if(SERVELAB_BUG_${bug}_LAB STREQUAL lab AND SERVELAB_BUG_${bug}_TRACK STREQUAL "cuda")
      gpu_check_bug_sources(bug_sources ${bug})
      list(APPEND wrong_kernels ${bug_sources})
    endif()
  endforeach()
  if(wrong_kernels)
    gpu_check_kernel_overrides(${lab}_cuda_wrong_kernels ${wrong_kernels})
    gpu_check_lab_binary(${lab} ${lab}_cuda_tests_wrong ${lab}_cuda_test_objects
                         $<TARGET_OBJECTS:${lab}_cuda_wrong_kernels>)
  endif()
endfunction()

file(GLOB lab_cuda_manifests ${SERVELAB_ROOT}/labs/lab[0-9][0-9]_*/manifest_cuda.json)
foreach(manifest ${lab_cuda_manifests})
  get_filename_component(lab_dir ${manifest} DIRECTORY)
  gpu_check_lab_track(${lab_dir})
endforeach()
