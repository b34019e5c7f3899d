# servelab — the two commands of README.md, and a few helpers.
#   make run       set up, build, and chat with the default model (SmolLM2-135M-Instruct)
#   make test      set up, build, and run the test suite through ctest (all but the
#                  `slow` label), then print the ten slowest tests
#   make test-all  the same with the slow tests too (the full mutation run, a long
#                  fuzz run, the GPU-check build): about half an hour more
# Both are idempotent: re-running skips what is already installed or built.

MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc)
PYTHON := .venv/bin/python
MODEL := data/models/SmolLM2-135M-Instruct.Q4_1.gguf
QUESTION ?= What is the capital of France? Answer in one sentence.

.PHONY: run test test-all setup build build-fuzz model goldens grade skeletons bench serve-report cpu-report clean

setup:
	@bash tools/setup.sh

model: setup

build: setup
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

build-fuzz: setup
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)

# Starts with the fixed question; keeps chatting while stdin is a terminal.
run: build
	@build/release/servelab chat --model $(MODEL) --message "$(QUESTION)" --max-tokens 128

# One ctest run (the fuzz target, built by its own clang preset, is one of its
# tests); the timings are read back from its JUnit report.
CTEST_REPORT := build/release/ctest-junit.xml
test: build build-fuzz
	@status=0; ctest --preset release -j $(JOBS) -LE slow --output-junit ctest-junit.xml || status=$$?; \
	  python3 tools/slowest_tests.py $(CTEST_REPORT); exit $$status

test-all: build build-fuzz
	@status=0; ctest --preset release -j $(JOBS) --output-junit ctest-junit.xml || status=$$?; \
	  python3 tools/slowest_tests.py $(CTEST_REPORT); exit $$status

# Regenerate the committed goldens from llama.cpp (llama-cpp-python builds
# llama.cpp from source: several minutes) and the gguf package.
goldens: setup
	@.venv/bin/python -m pip install -q -r tools/requirements-goldens.txt
	@.venv/bin/python tools/make_tokenizer_goldens.py
	@.venv/bin/python tools/make_llamacpp_goldens.py
	@.venv/bin/python tools/make_dequant_goldens.py
	@.venv/bin/python tools/make_chat_template_goldens.py

# Grade a lab: make grade LAB=1 (builds the lab, runs its tests and its
# throughput case against the reference, writes labs/labNN_<name>/results.json).
# TRACK=cuda grades the lab's GPU track (manifest_cuda.json -> results_cuda.json);
# without a GPU or nvcc it says so and exits 77 instead of giving a score.
TRACK ?= cpu
grade: setup
	@cmake --preset release >/dev/null
	@.venv/bin/python tools/grade.py --lab $(LAB) --track $(TRACK) --build-dir build/release

bench: build
	@build/release/servelab bench --model $(MODEL)

# servelab serve against llama.cpp's llama-server (continuous batching on), one
# trace at several concurrency levels and request rates (tools/build_peers.sh
# builds llama-server from the pinned source on first use, 10 minutes or more
# on 2 cores). ARGS=... passes options through, e.g. ARGS="--rates 1 2 --repetitions 3".
serve-report: build
	@$(PYTHON) tools/serve_side_by_side.py $(ARGS)

# servelab at its defaults against llama.cpp's own llama-bench and
# llama-batched-bench (built from the pinned llama-cpp-python sdist's source by
# tools/build_peers.sh on first use, 10 minutes or more on 2 cores; cached in build/peers/):
# batch-1 decode, 512-token prefill, 16-sequence decode, and the share of the
# memory bandwidth decode streams, interleaved. ARGS=... passes options through.
cpu-report: build
	@$(PYTHON) tools/cpu_peer_report.py $(ARGS)

# Regenerate labs/labNN_<name>/student/ from the reference's solution regions.
skeletons:
	@python3 tools/make_skeletons.py

clean:
	rm -rf build
