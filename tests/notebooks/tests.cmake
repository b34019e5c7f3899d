# tests/notebooks/tests.cmake — execute each lab notebook (notebooks/*.ipynb) headless.
#
# Included from the top CMakeLists.txt once the `servelab` target exists.
# The notebooks need a Python with jupyter nbconvert, ipykernel and matplotlib
# (tools/setup/requirements.txt, installed into .venv by tools/setup/setup.sh), passed as
# SERVELAB_PYTHON. Without it the tests are skipped with a status message.
#
# Each test runs the notebook in "small" mode (SERVELAB_NOTEBOOK_MODE=small: a
# tiny random model made on the spot, a few seconds) and writes the executed
# copy to <build>/notebooks/; the committed notebooks, with the plots of a full
# SmolLM2 run, are never rewritten by the tests.
#
# Tests registered (label "notebooks"):
#   notebook_lab01_naive_decoding   latency versus position without a KV cache
#   notebook_lab02_kv_cache         with versus without the cache; KV bytes per config
#   notebook_lab03_kv_compression   KV bytes for MHA/GQA/MQA/MLA and f32/f16/int8; int8/fp8 cache
#                                   quality against fp32; decode speed with an int8 cache
#   notebook_lab04_paged_attention  KV memory wasted and sequences at once, static reservation
#                                   against paging (kv-sim); prefix-cache hit rate and prefill
#                                   work on a shared-system-prompt workload (replay)
#   notebook_lab05_continuous_batching  static against continuous batching by concurrency and
#                                   workload; throughput and TTFT against load, max_num_seqs and
#                                   the token budget; a timeline of requests joining and leaving
#   notebook_lab06_speculative_decoding  speedup against K per drafter (n-gram, early exit, draft
#                                   model) and workload; tokens per pass against the i.i.d.
#                                   formula; verify and draft costs; break-even acceptance rates;
#                                   batch 1 against a batch
#   notebook_lab07_tensor_parallelism  all-reduced and gathered bytes counted against the formula;
#                                   all-reduce latency and bandwidth per back end (threads, MPI) and
#                                   their alpha-beta fit; predicted against measured all-reduce time;
#                                   decode step against N; predicted 7B/70B steps on NVLink and PCIe
#   notebook_lab08_kernels          GB/s of weights of the Q4_1 GEMV per step (servelab_bench's Gemv
#                                   cases) against the memory read bandwidth (membw_probe): the roof
#   notebook_lab09_flash_attention  attention time and scratch memory against the context, plain
#                                   against flash, prefill and decode; decode split against
#                                   unsplit; the whole model's step fused against unfused
#   notebook_lab10_weight_quantization  perplexity and KL against bits per weight for RTN, AWQ and
#                                   GPTQ at 4 and 3 bits and several group sizes, with file size,
#                                   decode speed and quantization time (tools/reports/quant_table.py; small
#                                   mode: a tiny model, 64-token windows)
#   notebook_lab11_radix_attention  prefix hits and tokens computed for hash+FCFS, radix+FCFS and
#                                   radix+LPM on four traces and five pool sizes (bench prefix-cache,
#                                   no model); throughput and TTFT with the model (tools/reports/radix_table.py;
#                                   small mode: a tiny model, 4 requests); a drawing of the tree
#   notebook_lab12_constrained_decoding  token-mask time against the vocabulary's size and per
#                                   grammar, by the trie walk and from the mask cache, compile
#                                   times, dependent tokens per cache entry (bench grammar, no
#                                   forward pass; small mode: 512 and 2,048 tokens, short walks)
#   notebook_serving_latency        TTFT/TPOT/E2E percentiles, throughput and goodput against the
#                                   request rate (tools/reports/serve_side_by_side.py; small mode: servelab
#                                   alone on a tiny model, no llama.cpp)
#   notebook_triangle               chapter 11.8's triangle: the latency-throughput Pareto frontier
#                                   coloured by cost, and each knob's measured deltas
#                                   (tools/reports/triangle_sweep.py; small mode: its --quick grid)

set(servelab_notebooks_ready FALSE)
if(SERVELAB_PYTHON AND EXISTS "${SERVELAB_PYTHON}")
  execute_process(
    COMMAND ${SERVELAB_PYTHON} -c "import nbconvert, nbclient, ipykernel, matplotlib"
    RESULT_VARIABLE servelab_notebooks_import_rc
    OUTPUT_QUIET ERROR_QUIET)
  if(servelab_notebooks_import_rc EQUAL 0)
    set(servelab_notebooks_ready TRUE)
  else()
    message(STATUS "servelab: ${SERVELAB_PYTHON} lacks nbconvert/ipykernel/matplotlib; skipping notebook tests")
  endif()
else()
  message(STATUS "servelab: SERVELAB_PYTHON not set or missing; skipping notebook tests")
endif()

if(servelab_notebooks_ready)
  set(servelab_notebooks_out ${CMAKE_BINARY_DIR}/notebooks)
  file(MAKE_DIRECTORY ${servelab_notebooks_out})
  # ENVIRONMENT takes a list: one "NAME=value" element per variable.
  set(servelab_notebooks_env
    "SERVELAB_NOTEBOOK_MODE=small"
    "SERVELAB_BIN=$<TARGET_FILE:servelab>"
    "SERVELAB_ROOT=${CMAKE_SOURCE_DIR}"
    "OMP_NUM_THREADS=1")
  foreach(notebook lab01_naive_decoding lab02_kv_cache lab03_kv_compression lab04_paged_attention
                  lab05_continuous_batching lab06_speculative_decoding lab07_tensor_parallelism
                  lab08_kernels lab09_flash_attention lab10_weight_quantization lab11_radix_attention
                  lab12_constrained_decoding serving_latency
                  triangle)
    add_test(NAME notebook_${notebook}
      COMMAND ${SERVELAB_PYTHON} -m jupyter nbconvert --to notebook --execute
              --ExecutePreprocessor.timeout=240
              --output-dir ${servelab_notebooks_out}
              ${CMAKE_SOURCE_DIR}/notebooks/${notebook}.ipynb
      WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/notebooks)
    set_tests_properties(notebook_${notebook} PROPERTIES
      LABELS "notebooks" TIMEOUT 300
      ENVIRONMENT "${servelab_notebooks_env}")
  endforeach()
endif()
