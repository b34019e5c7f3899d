# tests/tsan/tests.cmake — the threaded code under ThreadSanitizer.
#
# The tsan preset (clang, -fsanitize=thread, `make build-tsan`) builds only
# servelab and servelab_tests. Its ctest and the release tree's (the one
# `make test` runs, as it runs the fuzzer) both register these tests from
# this file, on the sanitized binaries in SERVELAB_TSAN_DIR; without them
# each test is SKIPPED, saying how to build them. tests/tsan/run_tsan.sh
# fails a test on any report from any process it started.
#
# What starts threads: the engine loop and its stream handoff (one engine
# thread, many submitters), a streamed answer read from the engine thread's
# streams, two loops driven by one thread (two served
# models), the thread communicator and tensor-parallel ranks, the chat
# template rendered from many threads, OpenMP's kernels (through Archer),
# and in the programs: the HTTP listener's reader and workers, the server's
# engine thread and drain, the router's health thread and upstream calls.
#
# Label "tsan" (make test, a few minutes): the unit tests about threads, and
# the server and the router end to end on tiny models. Label "tsan;slow"
# (make test-all): every unit test, every check of the OpenAI client suite,
# and the server's reliability suite and two-model serving under the sanitizer.
set(servelab_tsan_run bash ${CMAKE_SOURCE_DIR}/tests/tsan/run_tsan.sh)
set(servelab_tsan_threaded_tests ${SERVELAB_TSAN_DIR}/servelab_threaded_tests)
set(servelab_tsan_tests ${SERVELAB_TSAN_DIR}/servelab_tests)
set(servelab_tsan_cli ${SERVELAB_TSAN_DIR}/servelab)
# Two OpenMP threads where a test does not set its own count: parallel
# regions run for real, so Archer and TSan see their barriers.
set(servelab_tsan_env "OMP_NUM_THREADS=2")

set(servelab_tsan_threaded_units
  "EngineLoopTest.*:SseStreamTest.*:RingAllReduce.*:ThreadCommunicator.*:TensorParallelCost.*"
  ":TensorParallelModel.LogitsEqualTheWholeModelsForEverySplit"
  ":TensorParallelModel.GreedyTokensUnderContinuousBatchingEqualTheWholeModels"
  ":ChatTemplate.RendersTheSameOnManyThreadsAtOnce:ModelRunner.ThreadCountDoesNotChangeLogits"
  ":GemvStep2Threads.*:GemvStep4Blocked.MatchesPlainForAnyThreadCount")
string(REPLACE ";" "" servelab_tsan_threaded_units "${servelab_tsan_threaded_units}")
add_test(NAME tsan_threaded_units
  COMMAND ${servelab_tsan_run} ${servelab_tsan_threaded_tests} ${servelab_tsan_threaded_tests}
          --gtest_filter=${servelab_tsan_threaded_units})
add_test(NAME tsan_all_units
  COMMAND ${servelab_tsan_run} ${servelab_tsan_tests} ${servelab_tsan_tests}
          --gtest_filter=-TensorParallelMpi.*:*SmolLM2*:*Smollm2*)
set_tests_properties(tsan_threaded_units PROPERTIES LABELS "tsan" TIMEOUT 600)
set_tests_properties(tsan_all_units PROPERTIES LABELS "tsan;slow" TIMEOUT 3600)

# End to end: the same Python tests as the release tree's, on the sanitized CLI.
if(SERVELAB_PYTHON AND EXISTS "${SERVELAB_PYTHON}")
  set(servelab_e2e ${CMAKE_SOURCE_DIR}/tests/e2e)
  # make test: the checks where the server's threads meet; make test-all:
  # every check (the per-request fields too, which the release tree's
  # serve_openai_client runs in make test).
  add_test(NAME tsan_serve_openai_client
    COMMAND ${servelab_tsan_run} ${servelab_tsan_cli} ${SERVELAB_PYTHON}
            ${servelab_e2e}/test_openai_server.py --servelab ${servelab_tsan_cli} --threads-only)
  add_test(NAME tsan_serve_openai_client_all
    COMMAND ${servelab_tsan_run} ${servelab_tsan_cli} ${SERVELAB_PYTHON}
            ${servelab_e2e}/test_openai_server.py --servelab ${servelab_tsan_cli})
  add_test(NAME tsan_route_killed_backend
    COMMAND ${servelab_tsan_run} ${servelab_tsan_cli} ${SERVELAB_PYTHON}
            ${servelab_e2e}/test_router.py --servelab ${servelab_tsan_cli} --check killed_backend)
  add_test(NAME tsan_serve_reliability
    COMMAND ${servelab_tsan_run} ${servelab_tsan_cli} ${SERVELAB_PYTHON}
            ${servelab_e2e}/test_server_reliability.py --servelab ${servelab_tsan_cli})
  add_test(NAME tsan_serve_multi_model
    COMMAND ${servelab_tsan_run} ${servelab_tsan_cli} ${SERVELAB_PYTHON}
            ${servelab_e2e}/test_multi_model.py --servelab ${servelab_tsan_cli})
  set_tests_properties(tsan_serve_openai_client tsan_route_killed_backend PROPERTIES
    LABELS "tsan" TIMEOUT 900 SKIP_RETURN_CODE 77)
  set_tests_properties(tsan_serve_openai_client_all tsan_serve_reliability tsan_serve_multi_model PROPERTIES
    LABELS "tsan;slow" TIMEOUT 1800 SKIP_RETURN_CODE 77)
endif()
set_tests_properties(tsan_threaded_units tsan_all_units PROPERTIES
  SKIP_RETURN_CODE 77 ENVIRONMENT "${servelab_tsan_env}")
