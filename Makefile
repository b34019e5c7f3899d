# servelab — the two commands of README.md, and a few helpers.
#   make run       set up, build, and chat with the default model (SmolLM2-135M-Instruct)
#   make test      set up, build (release, and the fuzz and tsan trees with clang), and
#                  run the test suite through ctest (all but the `slow` label), then
#                  print the ten slowest tests
#   make test-all  the same with the slow tests too (the full mutation run, a long
#                  fuzz run, every unit test and the server suites under
#                  ThreadSanitizer, the grader's timed speed self-tests, the
#                  GPU-check build): about an hour more
#   make student-release OUT=dir   the course's student release, without solutions
#                  (the instructor's tree only; docs/teaching.md)
#   make autograder LAB=N   autograder_labNN.zip, the lab's Gradescope autograder
#                  (the instructor's tree only; docs/teaching.md)
# Both are idempotent: re-running skips what is already installed or built.

MAKEFLAGS += --no-print-directory
JOBS ?= $(shell nproc)
PYTHON := .venv/bin/python
MODEL := data/models/SmolLM2-135M-Instruct.Q4_1.gguf
QUESTION ?= What is the capital of France? Answer in one sentence.

.PHONY: run test test-all setup build build-fuzz build-tsan model goldens grade skeletons student-release autograder bench serve-report cpu-report clean

# The presets build with Ninja (its dependency scanning is much cheaper than
# make's on 2 cores); a tree configured by an older checkout with another
# generator is configured afresh (its CMake cache only, not its objects).
setup:
	@bash tools/setup/setup.sh
	@for tree in build/release build/fuzz build/tsan; do \
	  if [ -f $$tree/CMakeCache.txt ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$$' $$tree/CMakeCache.txt; then \
	    echo "setup: $$tree was configured with another generator; configuring it again for Ninja"; \
	    rm -rf $$tree/CMakeCache.txt $$tree/CMakeFiles; \
	  fi; \
	done

model: setup

build: setup
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

build-fuzz: setup
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz -j $(JOBS)

# servelab and its unit tests with ThreadSanitizer (clang): the tsan tests
# of `make test` (label "tsan", tests/tsan/tests.cmake) run these binaries.
build-tsan: setup
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan -j $(JOBS)

# Starts with the fixed question; keeps chatting while stdin is a terminal.
run: build
	@build/release/servelab chat --model $(MODEL) --message "$(QUESTION)" --max-tokens 128

# One ctest run (the fuzz target and the ThreadSanitizer binaries, built by
# their own clang presets, are run by some of its tests); the timings are read
# back from its JUnit report.
CTEST_REPORT := build/release/ctest-junit.xml
test: build build-fuzz build-tsan
	@status=0; ctest --preset release -j $(JOBS) -LE slow --output-junit ctest-junit.xml || status=$$?; \
	  python3 tools/reports/slowest_tests.py $(CTEST_REPORT); exit $$status

test-all: build build-fuzz build-tsan
	@cmake --build --preset tsan -j $(JOBS) --target servelab_tests
	@status=0; ctest --preset release -j $(JOBS) --output-junit ctest-junit.xml || status=$$?; \
	  python3 tools/reports/slowest_tests.py $(CTEST_REPORT); exit $$status

# Regenerate the committed goldens from llama.cpp (llama-cpp-python builds
# llama.cpp from source: several minutes) and the gguf package.
goldens: setup
	@.venv/bin/python -m pip install -q -r tools/goldens/requirements-goldens.txt
	@.venv/bin/python tools/goldens/make_tokenizer_goldens.py
	@.venv/bin/python tools/goldens/make_llamacpp_goldens.py
	@.venv/bin/python tools/goldens/make_dequant_goldens.py
	@.venv/bin/python tools/goldens/make_chat_template_goldens.py
	@.venv/bin/python tools/goldens/make_regex_goldens.py

# Grade a lab: make grade LAB=1 (builds the lab, runs its tests and its
# throughput case against the reference, writes labs/labNN_<name>/results.json).
# TRACK=cuda grades the lab's GPU track (manifest_cuda.json -> results_cuda.json);
# without a GPU or nvcc it says so and exits 77 instead of giving a score.
TRACK ?= cpu
grade: setup
	@cmake --preset release >/dev/null
	@.venv/bin/python tools/labkit/grade.py --lab $(LAB) --track $(TRACK) --build-dir build/release

bench: build
	@build/release/servelab bench --model $(MODEL)

# servelab serve against llama.cpp's llama-server (continuous batching on), one
# trace at several concurrency levels and request rates (tools/build_peers.sh
# builds llama-server from the pinned source on first use, 10 minutes or more
# on 2 cores). ARGS=... passes options through, e.g. ARGS="--rates 1 2 --repetitions 3".
serve-report: build
	@$(PYTHON) tools/reports/serve_side_by_side.py $(ARGS)

# servelab at its defaults against llama.cpp's own llama-bench and
# llama-batched-bench (built from the pinned llama-cpp-python sdist's source by
# tools/build_peers.sh on first use, 10 minutes or more on 2 cores; cached in build/peers/):
# batch-1 decode, 512-token prefill, 16-sequence decode, and the share of the
# read rate of the level the weights live in (L3 or DRAM) that decode streams;
# then a DRAM-bound case, a random Llama-3.2-1B-shaped Q4_1 model written into
# build/dram_case/ on first use, against DRAM's read rate (ARGS=--no-dram-case
# skips it). Interleaved. ARGS=... passes options through.
cpu-report: build
	@$(PYTHON) tools/reports/cpu_peer_report.py $(ARGS)

# Regenerate labs/labNN_<name>/student/ from the reference's solution regions
# (the instructor's tree only: a student release has no regions).
skeletons:
	@test -f tools/labkit/make_skeletons.py || { echo "skeletons: this is a student release; the skeletons come from the instructor's tree"; exit 2; }
	@python3 tools/labkit/make_skeletons.py

# The course's student release (docs/teaching.md): every solution region
# replaced by its skeleton, the reference's exercise objects prebuilt, the
# instructor's material left out, leak-checked. make student-release OUT=/tmp/course
student-release: build
	@test -f tools/labkit/student_release.py || { echo "student-release: this is a student release; cut releases from the instructor's tree"; exit 2; }
	@test -n "$(OUT)" || { echo "student-release: give the folder to write, OUT=dir"; exit 2; }
	@python3 tools/labkit/student_release.py --out $(OUT) --build-dir build/release

# The lab's Gradescope autograder (docs/teaching.md): a student release with the
# hidden tests kept, setup.sh and run_autograder. make autograder LAB=5
autograder: build
	@test -f tools/labkit/autograder/make_autograder.py || { echo "autograder: this is a student release; make autograders from the instructor's tree"; exit 2; }
	@test -n "$(LAB)" || { echo "autograder: give the lab, LAB=N"; exit 2; }
	@python3 tools/labkit/autograder/make_autograder.py --lab $(LAB) --build-dir build/release

clean:
	rm -rf build
