# tests/tools/tests.cmake — tests of the lab skeleton generator (tools/make_skeletons.py).
#
# Part of the lab framework (all labs). Included from the top CMakeLists.txt.
# Both tests need only the Python standard library, so any Python 3 will do.
#
# Tests registered (label "labs"):
#   make_skeletons_selftest   the generator's own tests, on temporary trees
#   make_skeletons_check      labs/*/student/ matches the solution regions in
#                             reference/ and kernels/ (fix: run the generator)

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME make_skeletons_selftest
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/tools/test_make_skeletons.py)
  add_test(NAME make_skeletons_check
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tools/make_skeletons.py --check)
  set_tests_properties(make_skeletons_selftest make_skeletons_check PROPERTIES
    LABELS "labs" TIMEOUT 60)
else()
  message(STATUS "servelab: no Python 3 interpreter; skipping the lab skeleton tests")
endif()
