# prebuilt_solutions.cmake — the reference exercise objects of a student release.
#
# Part of the lab framework (docs/teaching.md). In the instructor's tree every
# exercise file (a reference file some lab's student/ folder replaces) is
# compiled from its solution. A student release has no solution source: its
# exercise files hold the same skeleton as labs/labNN_*/student/, and the
# instructor ships their reference objects instead, compiled into
# prebuilt/linux-x86_64/libservelab_solutions.a, one member <exercise id>.o per
# file, C++ and CUDA (tools/labkit/student_release.py). Each member becomes the imported object
# library servelab_reference_<exercise id>, so the engines are put together
# exactly as in the instructor's tree: the reference objects of every file a
# lab keeps, and the student's own compiled source of the files it replaces.
#
# The objects hold baseline x86-64 code (SIMD is chosen at run time, as
# everywhere in the engine) for Linux and the GNU C++ library's ABI, and were
# compiled against this tree's headers: edit no header they include.

if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux" OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$")
  message(FATAL_ERROR
    "servelab: this student release's reference engine is prebuilt for Linux on x86-64 "
    "(prebuilt/linux-x86_64/); this is ${CMAKE_SYSTEM_NAME} on ${CMAKE_SYSTEM_PROCESSOR}. "
    "Use a Linux x86-64 machine (the course's, a VM or a container).")
endif()

# Unpacked at configure time; a new archive configures again.
set(SERVELAB_PREBUILT_DIR ${CMAKE_BINARY_DIR}/prebuilt_solutions)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${SERVELAB_PREBUILT_SOLUTIONS})
file(REMOVE_RECURSE ${SERVELAB_PREBUILT_DIR})
file(MAKE_DIRECTORY ${SERVELAB_PREBUILT_DIR})
execute_process(COMMAND ${CMAKE_AR} x ${SERVELAB_PREBUILT_SOLUTIONS}
  WORKING_DIRECTORY ${SERVELAB_PREBUILT_DIR}
  RESULT_VARIABLE unpack_rc ERROR_VARIABLE unpack_error)
if(NOT unpack_rc EQUAL 0)
  message(FATAL_ERROR "servelab: cannot unpack ${SERVELAB_PREBUILT_SOLUTIONS}: ${unpack_error}")
endif()
message(STATUS "servelab: student release: the reference exercise files are prebuilt "
               "(${SERVELAB_PREBUILT_SOLUTIONS})")

# The imported object library servelab_reference_<exercise_id>: the archive's
# <exercise_id>.o. A missing member means the archive and the tree come from
# different commits (RELEASE names the tree's).
function(servelab_import_prebuilt_solution exercise_id exercise_path)
  set(object ${SERVELAB_PREBUILT_DIR}/${exercise_id}.o)
  if(NOT EXISTS ${object} AND exercise_path MATCHES "\\.cu$")
    message(FATAL_ERROR
      "servelab: the prebuilt reference has no CUDA objects (${exercise_id}.o): the release "
      "was cut where nvcc was not found. Build without the GPU engine: "
      "cmake --preset release -DSERVELAB_CUDA=OFF")
  endif()
  if(NOT EXISTS ${object})
    message(FATAL_ERROR
      "servelab: the prebuilt reference has no object for ${exercise_path} "
      "(${exercise_id}.o in ${SERVELAB_PREBUILT_SOLUTIONS}): the library was built from "
      "another version of the course than this tree (see RELEASE); ask for a matching release")
  endif()
  add_library(servelab_reference_${exercise_id} OBJECT IMPORTED GLOBAL)
  set_target_properties(servelab_reference_${exercise_id} PROPERTIES IMPORTED_OBJECTS ${object})
endfunction()
