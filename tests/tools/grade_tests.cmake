# tests/tools/grade_tests.cmake — the autograder's own unit tests.
#
# Included from the top CMakeLists.txt. tests/tools/test_grade.py checks
# tools/labkit/grade.py against fake GoogleTest binaries and fake CLIs that it makes
# in a temporary folder, so it needs no lab build (Python standard library only).
#
# Test registered (label "tools"):
#   grade_selftest_unit   scoring, filters, crash/timeout handling, throughput
#                         curve, results.json schema, exit codes

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME grade_selftest_unit
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/tools/test_grade.py)
  set_tests_properties(grade_selftest_unit PROPERTIES
    LABELS "tools" TIMEOUT 120 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
else()
  message(STATUS "servelab: no Python 3 interpreter; skipping the autograder's unit tests")
endif()
