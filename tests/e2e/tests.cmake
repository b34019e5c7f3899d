# tests/e2e/tests.cmake — end-to-end tests: `servelab logits` against the numpy oracle.
#
# Included from the top CMakeLists.txt once the `servelab` target exists.
# The oracle (tools/goldens/numpy_oracle.py) needs a Python with numpy and gguf; that
# is SERVELAB_PYTHON (tools/setup/setup.sh makes .venv and passes it). Without it the
# tests are skipped with a status message, so a plain `cmake` build still works.
#
# Tests registered (label "e2e"):
#   oracle_tiny_<type>          tiny random model, tied output, each weight type
#   oracle_tiny_<type>_untied   the same with a separate output.weight
#   oracle_tiny_mla_*           tiny deepseek2 models (multi-head latent attention,
#                               dense MLP): with/without the query bottleneck
#                               (q lora), f32 and q8_0, and one with uneven shapes
#   traces_up_to_date           data/traces/*.jsonl match tools/goldens/make_traces.py (Lab 4)
#   oracle_smollm2              the real SmolLM2-135M Q4_1 model (skipped, exit 77,
#                               when data/models has no model file)
#   oracle_smollm2_4k           the same on a 4,096-token random prompt (label "slow")
#   quant_llamacpp_agreement    Lab 10: perplexity and greedy text of SmolLM2 and of an
#                               RTN file `servelab quantize` writes, against llama.cpp's
#                               (goldens); ..._calibrated: the AWQ and GPTQ files ("slow")
#   json_schema_grammar_jsonschema  Lab 12: JSON schema grammars' random sentences against
#                               Python's json and jsonschema; --check against mutations
#   bench_structured_smoke      Lab 12: `servelab bench structured` and its report on two
#                               small schemas; stopped outputs judged by jsonschema
#   bench_grammar_jsonschema    Lab 12: constrained random walks on SmolLM2's vocabulary
#                               (bench grammar, cached mask checked against the trie walk at
#                               every step), each finished output against jsonschema (skipped,
#                               exit 77, without the model)

set(SERVELAB_E2E_SCRIPT ${CMAKE_SOURCE_DIR}/tests/e2e/test_numpy_oracle.py)
set(SERVELAB_E2E_MODEL ${CMAKE_SOURCE_DIR}/data/models/SmolLM2-135M-Instruct.Q4_1.gguf)

set(servelab_e2e_ready FALSE)
if(SERVELAB_PYTHON AND EXISTS "${SERVELAB_PYTHON}")
  execute_process(
    COMMAND ${SERVELAB_PYTHON} -c "import numpy, gguf"
    RESULT_VARIABLE servelab_e2e_import_rc
    OUTPUT_QUIET ERROR_QUIET)
  if(servelab_e2e_import_rc EQUAL 0)
    set(servelab_e2e_ready TRUE)
  else()
    message(STATUS "servelab: ${SERVELAB_PYTHON} lacks numpy/gguf; skipping oracle e2e tests")
  endif()
else()
  message(STATUS "servelab: SERVELAB_PYTHON not set or missing; skipping oracle e2e tests")
endif()

if(servelab_e2e_ready)
  foreach(weight_type f32 f16 bf16 q8_0 q4_0 q4_1)
    foreach(tying tied untied)
      if(tying STREQUAL "untied")
        set(test_name oracle_tiny_${weight_type}_untied)
        set(untied_flag --untied)
      else()
        set(test_name oracle_tiny_${weight_type})
        set(untied_flag "")
      endif()
      add_test(NAME ${test_name}
        COMMAND ${SERVELAB_PYTHON} ${SERVELAB_E2E_SCRIPT}
                --servelab $<TARGET_FILE:servelab> --tiny ${weight_type} ${untied_flag}
                --n-random 3 --max-len 48)
      set_tests_properties(${test_name} PROPERTIES LABELS "e2e" TIMEOUT 120
        ENVIRONMENT "OMP_NUM_THREADS=1")
    endforeach()
  endforeach()

  # Multi-head latent attention (deepseek2). q8_0 needs every row length to be
  # a multiple of 32, so its query bottleneck is 32 wide; "shapes" makes every
  # MLA width different (nope 12, rope 6, value 20, latent 24, q lora 8) so a
  # mixed-up split or stride cannot hide behind equal sizes.
  set(servelab_mla_cases
    "mla_f32 f32"
    "mla_q8_0 q8_0"
    "mla_qlora_f32 f32 --q-lora-rank 16"
    "mla_qlora_q8_0_untied q8_0 --q-lora-rank 32 --untied"
    "mla_shapes_f32 f32 --q-lora-rank 8 --kv-lora-rank 24 --qk-nope-dim 12 \
--qk-rope-dim 6 --v-head-dim 20")
  foreach(mla_case IN LISTS servelab_mla_cases)
    # "<name> <weight type> [make-tiny-model MLA options...]"
    separate_arguments(mla_case UNIX_COMMAND "${mla_case}")
    list(POP_FRONT mla_case mla_name mla_weight_type)
    add_test(NAME oracle_tiny_${mla_name}
      COMMAND ${SERVELAB_PYTHON} ${SERVELAB_E2E_SCRIPT}
              --servelab $<TARGET_FILE:servelab> --tiny ${mla_weight_type} --mla ${mla_case}
              --n-random 3 --max-len 48)
    set_tests_properties(oracle_tiny_${mla_name} PROPERTIES LABELS "e2e" TIMEOUT 120
      ENVIRONMENT "OMP_NUM_THREADS=1")
  endforeach()

  # Three fixed prompts (5-37 tokens) plus two random ones of 10-40 tokens.
  add_test(NAME oracle_smollm2
    COMMAND ${SERVELAB_PYTHON} ${SERVELAB_E2E_SCRIPT}
            --servelab $<TARGET_FILE:servelab> --model ${SERVELAB_E2E_MODEL}
            --n-random 2 --min-len 10 --max-len 40)
  set_tests_properties(oracle_smollm2 PROPERTIES
    LABELS "e2e" TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")

  # A 4,096-token prompt (half SmolLM2's trained context): 256 query tiles
  # and 32 key ranges per query for the flash kernels, every position
  # checked. 10-16 minutes on 2 cores (the float64 oracle's 4096 x 4096
  # attention per layer, and 800 MB of logits): `make test-all` only.
  add_test(NAME oracle_smollm2_4k
    COMMAND ${SERVELAB_PYTHON} ${SERVELAB_E2E_SCRIPT}
            --servelab $<TARGET_FILE:servelab> --model ${SERVELAB_E2E_MODEL}
            --n-random 1 --min-len 4096 --max-len 4096)
  set_tests_properties(oracle_smollm2_4k PROPERTIES
    LABELS "e2e;slow" TIMEOUT 1800 SKIP_RETURN_CODE 77)
endif()

# The CLI as a user meets it (Python standard library only). One OpenMP
# thread per process: ctest runs tests side by side.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_tiny_model
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/e2e/test_cli.py
            --servelab $<TARGET_FILE:servelab>)
  add_test(NAME cli_smollm2_chat
    COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/tests/e2e/test_cli.py
            --servelab $<TARGET_FILE:servelab> --smollm2 ${SERVELAB_E2E_MODEL})
  set_tests_properties(cli_tiny_model cli_smollm2_chat PROPERTIES
    LABELS "e2e" TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# Lab 10: `servelab perplexity` and the files `servelab quantize` writes
# against llama.cpp's llama-perplexity and llama-completion on the same files
# (goldens: data/golden/llamacpp_quant.json, tools/goldens/make_quant_goldens.py).
# The RTN file takes seconds to make again; the AWQ and GPTQ ones, with their
# calibration pass, minutes: `make test-all` only.
if(servelab_e2e_ready)
  add_test(NAME quant_llamacpp_agreement
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_quant_llamacpp.py
            --servelab $<TARGET_FILE:servelab> source_q4_1 rtn_q4_0)
  add_test(NAME quant_llamacpp_agreement_calibrated
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_quant_llamacpp.py
            --servelab $<TARGET_FILE:servelab> awq_q4_0 gptq_q4_0)
  set_tests_properties(quant_llamacpp_agreement PROPERTIES
    LABELS "e2e" TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
  set_tests_properties(quant_llamacpp_agreement_calibrated PROPERTIES
    LABELS "e2e;slow" TIMEOUT 1200 SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
endif()

# Lab 12: every random sentence of a JSON schema's grammar must parse with
# json.loads and validate with jsonschema (tools/setup/requirements.txt):
# the schemas of data/schemas/ (SchemaStore, tools/goldens/fetch_schemas.py)
# and 100 random ones; and `servelab grammar --check` must reject samples
# made invalid. No model; 20 to 40 s on two busy cores (mostly process start-up).
if(SERVELAB_PYTHON AND EXISTS "${SERVELAB_PYTHON}")
  add_test(NAME json_schema_grammar_jsonschema
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_json_schema_grammar.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(json_schema_grammar_jsonschema PROPERTIES LABELS "e2e" TIMEOUT 180)
  # `servelab bench structured` through tools/reports/structured_report.py
  # --servelab-only: two small schemas, 24 tokens, one round, batches 1 and 2;
  # every figure present, every stopped output valid (jsonschema), bad input
  # refused in one line. About 10 s; skipped (77) without SmolLM2.
  add_test(NAME bench_structured_smoke
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_bench_structured.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(bench_structured_smoke PROPERTIES LABELS "e2e" TIMEOUT 120
    SKIP_RETURN_CODE 77)
  add_test(NAME bench_grammar_jsonschema
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_bench_grammar.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(bench_grammar_jsonschema PROPERTIES LABELS "e2e" TIMEOUT 180
    SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# Lab 4's request traces (data/traces/) must match their generator.
if(servelab_e2e_ready)
  add_test(NAME traces_up_to_date
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tools/goldens/make_traces.py --check)
  set_tests_properties(traces_up_to_date PROPERTIES LABELS "e2e" TIMEOUT 60)
endif()

# Tensor parallelism (Lab 7), label "tp":
#   tp_mpi_unit   the MPI back end's unit test, one process per rank under
#                 mpirun (oversubscribed on this 2-core machine); a skip fails it
#   tp_cli        generate --tp N (threads N = 2, 4; MPI N = 2; SmolLM2 N = 3)
#                 against N = 1, the cost counters against the formula, and the
#                 one-line refusals
find_package(Python3 COMPONENTS Interpreter)
set(servelab_mpirun "")
if(MPI_CXX_FOUND AND MPIEXEC_EXECUTABLE)
  set(servelab_mpirun ${MPIEXEC_EXECUTABLE})
  add_test(NAME tp_mpi_unit
    COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 2
            $<TARGET_FILE:servelab_tests> --gtest_filter=TensorParallelMpi.*)
  set_tests_properties(tp_mpi_unit PROPERTIES LABELS "tp" TIMEOUT 300
    ENVIRONMENT "OMP_NUM_THREADS=1" FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
else()
  message(STATUS "servelab: no MPI (mpirun); the MPI tensor-parallel tests are not registered")
endif()
if(Python3_Interpreter_FOUND)
  add_test(NAME tp_cli
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/e2e/test_tensor_parallel_cli.py
            --servelab $<TARGET_FILE:servelab> --mpirun "${servelab_mpirun}"
            --model ${SERVELAB_E2E_MODEL})
  set_tests_properties(tp_cli PROPERTIES LABELS "tp" TIMEOUT 600)
endif()

# The OpenAI-compatible server, label "serve": the official `openai` client
# (tools/setup/requirements.txt) against `servelab serve` — completions and chat,
# streaming, 64 concurrent clients against offline generation, errors,
# disconnects, a bounded HTTP fuzz run, SIGTERM. serve_reliability holds it
# against hostile and careless clients (slow headers, chunked bodies over the
# limit, pipelining, a taken port, disconnects, fair prefill, the drain, 200
# concurrent streams), each check bounded in time; serve_soak repeats the
# 200-stream round for 10 minutes (label "slow").
if(SERVELAB_PYTHON AND EXISTS "${SERVELAB_PYTHON}")
  add_test(NAME serve_openai_client
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_openai_server.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(serve_openai_client PROPERTIES LABELS "serve" TIMEOUT 600)
  add_test(NAME serve_reliability
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_server_reliability.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(serve_reliability PROPERTIES LABELS "serve" TIMEOUT 600)
  # `servelab route` (chapter 11.7, routing): three tiny replicas behind a
  # round-robin router, one killed mid-run (no request lost that had not
  # started); cache-aware against round robin on SmolLM2 replicas with small
  # KV pools (hit rate, TTFT); and against nginx's round robin (skipped, 77,
  # without nginx or the model).
  add_test(NAME route_killed_backend
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_router.py
            --servelab $<TARGET_FILE:servelab> --check killed_backend)
  add_test(NAME route_cache_aware
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_router.py
            --servelab $<TARGET_FILE:servelab> --check cache_aware)
  add_test(NAME route_vs_nginx
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_router_nginx.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(route_killed_backend route_cache_aware route_vs_nginx PROPERTIES
    LABELS "serve" TIMEOUT 300 SKIP_RETURN_CODE 77)
  # The router and the server against hostile clients: a deeply nested body,
  # 300 slow connections, chunked bodies over the limit, bodies that cost
  # far more parsed than sent, ambiguous framing, SIGHUP, nonsense
  # --kv-share weights (tests/e2e/test_hostile_clients.py says how each once
  # broke the router).
  add_test(NAME route_hostile_clients
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_hostile_clients.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(route_hostile_clients PROPERTIES LABELS "serve" TIMEOUT 600)
  add_test(NAME serve_soak
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_server_reliability.py
            --servelab $<TARGET_FILE:servelab> --only many_streams --soak-seconds 600)
  set_tests_properties(serve_soak PROPERTIES LABELS "serve;slow" TIMEOUT 1200)
  # Two models in one server (SmolLM2 and a tiny one): /v1/models, routing by
  # the request's model, labelled /metrics, each answering as it does alone,
  # and a saturated model stepping at most once per step of the other.
  add_test(NAME serve_multi_model
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_multi_model.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(serve_multi_model PROPERTIES LABELS "serve" TIMEOUT 300
    SKIP_RETURN_CODE 77)
  # Tool calling (docs/serving.md "Tool calling"): tiny models with Qwen2.5's,
  # Llama 3.1's and Mistral Nemo's chat templates; histories of tool calls and
  # results rendered as jinja2 renders them, chat_template_kwargs,
  # continue_final_message, refusals, streams holding back a call's marker.
  add_test(NAME serve_tool_calling
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_tool_calling.py
            --servelab $<TARGET_FILE:servelab>)
  set_tests_properties(serve_tool_calling PROPERTIES LABELS "serve" TIMEOUT 120)
  # Lab 12: constrained decoding on SmolLM2 through the official client:
  # parse() with a Pydantic model, response_format, structured_outputs,
  # llama.cpp's fields, a required tool call, the 400s.
  add_test(NAME serve_structured_outputs
    COMMAND ${SERVELAB_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/test_structured_outputs.py
            --servelab $<TARGET_FILE:servelab> --model ${SERVELAB_E2E_MODEL})
  set_tests_properties(serve_structured_outputs PROPERTIES
    LABELS "serve" TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
