# tests/tools/tests.cmake — tests of the lab skeleton generator (tools/labkit/make_skeletons.py),
# of the student release cut from it (tools/labkit/student_release.py) and of the course's
# Gradescope autograder (tools/labkit/autograder/).
#
# Part of the lab framework (all labs; docs/teaching.md). Included from the top
# CMakeLists.txt. They need only the Python standard library, git, ar and
# strip (the autograder's tests: .venv's Python, for jsonschema); the proofs
# build a whole release.
#
# Tests registered (label "labs"), in the instructor's tree only (a student
# release has neither tool):
#   gpu_check_script_logic    (label "tools") tools/gpu_check.sh's options, the
#                             peers' archive round trip, peer_bench.py on fake
#                             engines (tests/tools/test_gpu_check.py)
#   make_skeletons_selftest   the generator's own tests, on temporary trees
#   make_skeletons_check      labs/*/student/ matches the solution regions in
#                             reference/ and kernels/ (fix: run the generator)
#   lab_manifests_grade_every_test  every test a lab's manifest builds is in a
#                             graded group, or in its "not_graded" with a reason
#   student_release_cut       a release cut from this tree, with the archive of
#                             this build's reference objects: no solution line in
#                             it, the same bytes twice, the instructor's files left
#                             out; and a pasted solution line fails its leak check
#   student_release_proof     (label "slow") that release built from scratch:
#                             make run chats, every lab's skeleton grades 0 and
#                             the instructor's solutions copied in grade 100
#   autograder_lab05          Lab 5's Gradescope autograder zip (tools/labkit/autograder/),
#                             unpacked in a scratch /autograder: run_autograder places
#                             the skeleton, the reference and a planted bug (on this
#                             build's binaries of them) and a failing build; each
#                             results.json meets Gradescope's schema (jsonschema, in
#                             .venv) with the right scores
#   autograder_lab05_proof    (label "slow") the same zip's setup.sh builds the lab,
#                             and run_autograder compiles and grades each submission,
#                             a file that does not compile too

find_package(Python3 COMPONENTS Interpreter)
if(SERVELAB_STUDENT_RELEASE)
  # Neither tool ships in a student release.
elseif(Python3_Interpreter_FOUND)
  add_test(NAME make_skeletons_selftest
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/tools/test_make_skeletons.py)
  add_test(NAME make_skeletons_check
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tools/labkit/make_skeletons.py --check)
  add_test(NAME lab_manifests_grade_every_test
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/tools/test_lab_coverage.py)
  set_tests_properties(make_skeletons_selftest make_skeletons_check lab_manifests_grade_every_test
    PROPERTIES LABELS "labs" TIMEOUT 60 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
  # tools/gpu_check.sh's options, the peers' archive and the peer comparison
  # (tools/gpu_check/peer_bench.py) on fake engines: what runs without a GPU.
  add_test(NAME gpu_check_script_logic
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/tools/test_gpu_check.py)
  set_tests_properties(gpu_check_script_logic PROPERTIES
    LABELS "tools" TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
  add_test(NAME student_release_cut
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/tools/test_student_release.py
            --build-dir ${CMAKE_BINARY_DIR})
  set_tests_properties(student_release_cut PROPERTIES
    LABELS "labs" TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
  add_test(NAME student_release_proof
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/tools/test_student_release.py
            --build-dir ${CMAKE_BINARY_DIR} --proof)
  set_tests_properties(student_release_proof PROPERTIES
    LABELS "labs;slow" TIMEOUT 5400 RUN_SERIAL TRUE ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
  if(SERVELAB_PYTHON AND EXISTS "${SERVELAB_PYTHON}")  # .venv: jsonschema
    add_test(NAME autograder_lab05
      COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/tools/test_autograder.py
              --build-dir ${CMAKE_BINARY_DIR})
    set_tests_properties(autograder_lab05 PROPERTIES
      LABELS "labs" TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
    add_test(NAME autograder_lab05_proof
      COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/tools/test_autograder.py
              --build-dir ${CMAKE_BINARY_DIR} --proof)
    set_tests_properties(autograder_lab05_proof PROPERTIES
      LABELS "labs;slow" TIMEOUT 3600 RUN_SERIAL TRUE ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
  endif()
else()
  message(STATUS "servelab: no Python 3 interpreter; skipping the lab skeleton tests")
endif()
