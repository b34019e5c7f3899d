#!/usr/bin/env python3
"""grade.py — the servelab autograder.

Grades one lab and writes a Gradescope-compatible results.json:

  1. build   `cmake --build BUILD --target labNN_tests servelab-labNN servelab`
             (skipped with --no-build). A failed build is one failing
             "compilation" entry worth the whole lab, with the compiler's last lines.
  2. tests   run the lab's GoogleTest binary once with --gtest_output=json and
             score each manifest group: points x (passed tests / tests in the group).
             If the binary crashes (a signal, an abort, an early exit), the groups
             that lost results are run again one at a time, and a group that crashes
             too test by test, so one crashing test does not zero the others; its
             entry says which test crashed and how (SIGSEGV, SIGABRT, ...). Every run
             is watched test by test: a test that runs past the manifest's
             "test_timeout_s" (default 30 s; --test-timeout) is stopped as hung, and
             the tests after it run without it, so a hang costs that test its
             limit, not the lab's whole timeout_s.
  3. speed   optional: run the student's CLI and the reference CLI alternately
             (S R, R S, ...) on `bench`, with the manifest's OpenMP `threads`
             (default 1), and turn the ratio of one metric into points on a
             linear curve. A load probe (/proc/stat) leaves out rounds that
             other programs disturbed; the ratio cancels which run went first
             and is measured until its standard error is 2 % or less. When
             that cannot be had, the speed is "not graded: machine busy" and
             scores 0 of 0 (the rules: the comment that opens grading/timing.py).
             A manifest whose throughput names a "program" (a source file that
             labs/labs.cmake builds on the student's engine as
             labNN_throughput) instead runs that program, which times the
             student's kernel and a reference kernel itself, in one process,
             and prints both: each run is one round, its ratio
             metric / reference_metric.
  4. report  write results.json (always, even if the grader itself fails),
             print a scorecard and a last line `lab NN: S/M points`.

The lab's manifest, labs/labNN_<name>/manifest.json, says what to grade:

  {"lab": 1, "name": "naive_decoding", "timeout_s": 300, "test_timeout_s": 30,
   "groups": [{"name": "RMSNorm", "filter": "Lab01RmsNorm.*", "points": 10}, ...],
   "throughput": {"name": "Decode speed", "points": 10,
                  "args": ["bench", "--model", "{model}", ...],
                  "metric": "decode_tokens_per_s", "repetitions": 3,
                  "full_ratio": 0.8333, "zero_ratio": 0.1}}
   (or, for a kernel: "throughput": {"name": ..., "points": 10,
                  "program": "tools/labkit/gemv_speed.cpp", "args": ["--trials", "7"],
                  "metric": "step4_gb_per_s", "reference_metric": "quant_matmul_gb_per_s", ...})

A throughput case may also say "threads" (OMP_NUM_THREADS of the timed runs,
default 1) and "cores" (how many cores a timed run keeps busy, default its
threads; Lab 7's three rank threads: 3), which the load probe needs to know
how much other work leaves a run undisturbed.

A group's filter is a gtest-style pattern: `Suite.*`, `Suite.Test`, several
joined by ':', optionally followed by '-' and patterns to leave out.
Tests are always run with OMP_NUM_THREADS=1 unless it is set; the timed runs
use the manifest's `threads` (default 1) whatever the environment says.

Tracks. A lab may have a GPU track besides its CPU one: `--track cuda` reads
manifest_cuda.json (which says "track": "cuda"), builds and runs
labNN_cuda_tests (the lab's CUDA kernels from student/*.cu, everything else
the reference) and writes results_cuda.json. A GPU track is not graded where
it cannot run, and says so instead of giving a score: when the build folder
was configured without CUDA (no nvcc, or SERVELAB_CUDA=OFF), or when every
graded test was skipped (no usable GPU: the runtime's reason, as the tests
print it). A CUDA kernel cannot throw, so an unwritten one prints
"not implemented: labNN: <kernel>" and writes nothing; that line is added to
its failing tests' messages.

The code is the package grading/ beside this file, one module per stage
(manifest, build, process, gtest, timing, results, cli; grading/__init__.py
says which holds what).

Exit status: 0 when a grade was written (whatever the score); 1 when
--min-score / --max-score (percent of the maximum) is not met, for self-tests;
77 with --skip-if-busy when the thresholds were met but the speed could not
be timed (machine busy);
2 when the grader could not grade (bad manifest, bad arguments, grader bug) —
results.json then holds a failing "grader error" entry; 77 when the track
could not run here (results.json says why; ctest's SKIP_RETURN_CODE).

Usage: grade.py --lab N [--track cpu|cuda] [--build-dir build/release] [--no-build]
                [--student-tests PATH] [--student-cli PATH] [--reference-cli PATH]
                [--student-program PATH] [--program-arg=ARG ...]
                [--manifest PATH] [--model PATH] [--repetitions K] [--max-rounds N]
                [--skip-throughput] [--group NAME ...] [--skip-if-busy] [--test-timeout S]
                [--out results.json] [--min-score X] [--max-score X]
"""
import sys

# The grader runs inside students' trees (a release, Gradescope's container):
# it leaves no __pycache__ behind in them.
sys.dont_write_bytecode = True
from grading.cli import main  # noqa: E402  (the package beside this file)

if __name__ == "__main__":
    sys.exit(main())
