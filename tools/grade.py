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
             scores 0 of 0 (the rules: the comment before `class BenchError`).
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
                  "program": "tools/gemv_speed.cpp", "args": ["--trials", "7"],
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
import argparse
import fnmatch
import itertools
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUILD_DIR = REPO_ROOT / "build" / "release"
DEFAULT_MODEL = REPO_ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

DEFAULT_TIMEOUT_S = 300
# One test's limit: 4.5x the slowest reference test of any lab (Lab 6's
# SpeculativeEngine.SampledTokensFollowTheTargetsDistribution, 6.6 s on the 2-core
# course machine with a build beside it, 2026-12-06), and short beside timeout_s, so
# a hang in a student's code costs its test this long, not the lab's whole timeout.
DEFAULT_TEST_TIMEOUT_S = 30
BUILD_TIMEOUT_S = 3600
OUTPUT_LIMIT = 2000          # characters of output kept per results.json entry
BUILD_LOG_LINES = 60         # compiler lines shown when the build fails
LAST_OUTPUT_LINES = 15       # program lines shown when a run crashes
NOT_GRADED_EXIT = 77         # the track cannot run here (the automake/ctest "skipped" code)
TRACK_MANIFESTS = {"cpu": "manifest.json", "cuda": "manifest_cuda.json"}


class NotGraded(Exception):
    """The track cannot run on this machine or build; the message says why."""


# --------------------------------------------------------------------------- manifest

class ManifestError(Exception):
    """The manifest is missing or malformed; the message is one line."""


# Gradescope's test visibilities. A group that is not "visible" is the
# course's hidden test: left out of the student release (tools/student_release.py),
# graded by make grade in the instructor's tree and by the autograder.
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


@dataclass
class Group:
    name: str
    filter: str
    points: float
    visibility: str = "visible"

    @property
    def hidden(self):
        return self.visibility != "visible"


@dataclass
class Throughput:
    name: str
    points: float
    args: list
    metric: str
    repetitions: int = 3
    full_ratio: float = 1 / 1.2
    zero_ratio: float = 0.1
    timeout_s: float = DEFAULT_TIMEOUT_S
    program: str = None           # its source; the student's build is BUILD/labNN_throughput
    reference_metric: str = None  # with program: the reference kernel's field, same output
    threads: int = 1              # OMP_NUM_THREADS of the timed runs
    cores: int = None             # cores a timed run keeps busy (default: threads)
    max_rounds: int = None        # rounds at most (default MAX_ROUNDS_FACTOR x repetitions)
    target_error: float = None    # stop at this standard error (default RATIO_SE_TARGET)

    def __post_init__(self):
        if self.cores is None:
            self.cores = self.threads

    def round_limit(self):
        """Rounds at most: --max-rounds, never below the repetitions, nor below
        the rounds any ratio needs (MIN_ROUNDS_PER_ORDER of each order)."""
        least = max(self.repetitions, 2 * MIN_ROUNDS_PER_ORDER)
        if self.max_rounds is None:
            return max(MAX_ROUNDS_FACTOR * self.repetitions, least)
        return max(self.max_rounds, least)


@dataclass
class Lab:
    number: int
    name: str
    folder: Path
    timeout_s: float
    groups: list
    throughput: Throughput = None
    track: str = "cpu"
    test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S  # one test's limit (a hang stops here)
    hidden_points: float = 0  # a release's manifest: the points of the groups it left out

    @property
    def tag(self):
        """'lab01' for lab 1: the prefix of the lab's build targets."""
        return f"lab{self.number:02d}"

    @property
    def test_target(self):
        """The lab's test binary for this track: lab01_tests, lab01_cuda_tests."""
        return f"{self.tag}_tests" if self.track == "cpu" else f"{self.tag}_{self.track}_tests"

    @property
    def throughput_target(self):
        """The build target of the manifest's throughput program: lab08_throughput."""
        return f"{self.tag}_throughput"

    @property
    def results_name(self):
        return "results.json" if self.track == "cpu" else f"results_{self.track}.json"

    @property
    def title(self):
        track = "" if self.track == "cpu" else f", {self.track} track"
        return f"lab {self.number:02d} ({self.name}{track})"

    @property
    def max_score(self):
        total = sum(group.points for group in self.groups)
        return total + (self.throughput.points if self.throughput else 0)


GROUP_KEYS = {"name", "filter", "points", "description", "visibility"}
THROUGHPUT_KEYS = {"name", "points", "args", "metric", "repetitions", "full_ratio",
                   "zero_ratio", "timeout_s", "description", "program", "reference_metric",
                   "threads", "cores"}


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def require(condition, where, problem):
    if not condition:
        raise ManifestError(f"{where} {problem}")


def check_keys(table, allowed, where):
    unknown = sorted(set(table) - allowed)
    require(not unknown, where, f"has unknown key(s) {', '.join(unknown)} "
                                f"(allowed: {', '.join(sorted(allowed))})")


def parse_group(table, where):
    require(isinstance(table, dict), where, "must be an object")
    check_keys(table, GROUP_KEYS, where)
    for key in ("name", "filter"):
        value = table.get(key)
        require(isinstance(value, str) and value.strip(), f"{where}.{key}", "must be a non-empty string")
    points = table.get("points")
    require(is_number(points) and points >= 0, f"{where}.points", "must be a number >= 0")
    visibility = table.get("visibility", "visible")
    require(visibility in VISIBILITIES, f"{where}.visibility",
            f"must be one of {', '.join(VISIBILITIES)} (Gradescope's)")
    return Group(table["name"], table["filter"], points, visibility)


def parse_throughput(table, default_timeout):
    where = "throughput"
    require(isinstance(table, dict), where, "must be an object")
    check_keys(table, THROUGHPUT_KEYS, where)
    require(isinstance(table.get("name"), str) and table["name"].strip(), f"{where}.name",
            "must be a non-empty string")
    require(is_number(table.get("points")) and table["points"] >= 0, f"{where}.points",
            "must be a number >= 0")
    args = table.get("args")
    require(isinstance(args, list) and args and all(isinstance(a, str) for a in args),
            f"{where}.args", "must be a non-empty list of strings")
    require(isinstance(table.get("metric"), str) and table["metric"], f"{where}.metric",
            "must be a non-empty string")
    spec = Throughput(table["name"], table["points"], args, table["metric"], timeout_s=default_timeout)
    require(("program" in table) == ("reference_metric" in table), where,
            "needs both program and reference_metric, or neither")
    for key in ("program", "reference_metric"):
        if key in table:
            require(isinstance(table[key], str) and table[key].strip(), f"{where}.{key}",
                    "must be a non-empty string")
            setattr(spec, key, table[key])
    for key, low in (("repetitions", 1), ("threads", 1), ("cores", 1)):
        value = table.get(key, getattr(spec, key))
        require(isinstance(value, int) and not isinstance(value, bool) and value >= low,
                f"{where}.{key}", f"must be an integer >= {low}")
        setattr(spec, key, value)
    if "cores" not in table:
        spec.cores = spec.threads
    for key in ("full_ratio", "zero_ratio", "timeout_s"):
        value = table.get(key, getattr(spec, key))
        require(is_number(value) and value >= 0, f"{where}.{key}", "must be a number >= 0")
        setattr(spec, key, value)
    require(spec.zero_ratio < spec.full_ratio, where, "needs zero_ratio < full_ratio")
    require(spec.timeout_s > 0, f"{where}.timeout_s", "must be > 0")
    return spec


def parse_manifest(data, lab_number, folder, track="cpu"):
    """Checks a loaded manifest and returns a Lab; raises ManifestError."""
    require(isinstance(data, dict), "manifest", "must be a JSON object")
    require(data.get("lab") == lab_number and not isinstance(data.get("lab"), bool), "manifest",
            f"says lab {data.get('lab')!r}, but --lab is {lab_number}")
    require(data.get("track", "cpu") == track, "manifest",
            f"is for the {data.get('track', 'cpu')!r} track, but --track is {track}")
    name = data.get("name")
    require(isinstance(name, str) and name.strip(), "name", "must be a non-empty string")
    timeout_s = data.get("timeout_s", DEFAULT_TIMEOUT_S)
    require(is_number(timeout_s) and timeout_s > 0, "timeout_s", "must be a number > 0")
    test_timeout_s = data.get("test_timeout_s", DEFAULT_TEST_TIMEOUT_S)
    require(is_number(test_timeout_s) and test_timeout_s > 0, "test_timeout_s",
            "must be a number > 0")
    # Tests the lab builds that do not run the student's code, each with its
    # reason (tests/tools/test_lab_coverage.py holds every other test to a group).
    for i, entry in enumerate(data.get("not_graded", [])):
        require(isinstance(entry, dict) and set(entry) == {"filter", "why"}
                and all(isinstance(entry[k], str) and entry[k].strip() for k in entry),
                f"not_graded[{i}]", 'must be {"filter": ..., "why": ...}, both non-empty')
    groups = data.get("groups")
    require(isinstance(groups, list) and groups, "groups", "must be a non-empty list")
    parsed = [parse_group(group, f"groups[{i}]") for i, group in enumerate(groups)]
    names = [group.name for group in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    require(not duplicates, "groups", f"repeat the name(s) {', '.join(duplicates)}")
    throughput = None
    if data.get("throughput") is not None:
        throughput = parse_throughput(data["throughput"], timeout_s)
        require(throughput.name not in names, "throughput.name", "is also a group name")
    hidden_points = data.get("hidden_points", 0)
    require(is_number(hidden_points) and hidden_points >= 0, "hidden_points", "must be a number >= 0")
    return Lab(lab_number, name, folder, timeout_s, parsed, throughput, track, test_timeout_s,
               hidden_points)


def find_lab_folder(lab_number):
    """labs/labNN_<name>/ for lab N, or None when there is not exactly one."""
    folders = [p for p in (REPO_ROOT / "labs").glob(f"lab{lab_number:02d}_*") if p.is_dir()]
    return folders[0] if len(folders) == 1 else None


def load_lab(lab_number, manifest_path=None, track="cpu"):
    """Reads and checks the lab's manifest for a track; raises ManifestError."""
    if manifest_path is None:
        folder = find_lab_folder(lab_number)
        if folder is None:
            raise ManifestError(f"no single lab folder labs/lab{lab_number:02d}_<name>/ in {REPO_ROOT}")
        manifest_path = folder / TRACK_MANIFESTS[track]
        if track != "cpu" and not manifest_path.is_file():
            raise ManifestError(f"lab {lab_number} has no {track} track ({manifest_path} is missing)")
    manifest_path = Path(manifest_path)
    try:
        data = json.loads(manifest_path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ManifestError(f"{manifest_path}: cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ManifestError(f"{manifest_path}: not valid JSON: {error}") from None
    try:
        lab = parse_manifest(data, lab_number, manifest_path.parent, track)
    except ManifestError as error:
        raise ManifestError(f"{manifest_path}: {error}") from None
    expected_folder = f"lab{lab_number:02d}_{lab.name}"
    if manifest_path.parent.parent == REPO_ROOT / "labs" and manifest_path.parent.name != expected_folder:
        raise ManifestError(f"{manifest_path}: name {lab.name!r} does not match the folder "
                            f"(expected labs/{expected_folder}/)")
    return lab


# --------------------------------------------------------------------------- results

@dataclass
class Entry:
    """One line of the scorecard and one element of results.json's "tests"."""
    name: str
    score: float
    max_score: float
    output: str = ""
    passed: bool = None  # None: passed when it earned every point
    visibility: str = "visible"  # Gradescope's: a hidden group's entry is hidden from students

    def __post_init__(self):
        if self.passed is None:
            self.passed = self.score >= self.max_score

    def to_json(self):
        return {"name": self.name, "score": round(self.score, 2), "max_score": round(self.max_score, 2),
                "status": "passed" if self.passed else "failed",
                "output": truncate(self.output, OUTPUT_LIMIT), "visibility": self.visibility}


def truncate(text, limit):
    if len(text) <= limit:
        return text
    return text[:limit - 20].rstrip() + "\n... (truncated)"


def tail(text, lines):
    """The last `lines` non-empty lines of text."""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def total_score(entries):
    return round(sum(round(entry.score, 2) for entry in entries), 2)


def write_results(path, entries, leaderboard, seconds, summary=""):
    """results.json in Gradescope's schema; `summary`, the scorecard's last line, is
    its top-level "output" (what a student reads above the tests)."""
    results = {
        "score": total_score(entries),
        "max_score": round(sum(entry.max_score for entry in entries), 2),
        "output": summary,
        "tests": [entry.to_json() for entry in entries],
        "leaderboard": leaderboard,
        "execution_time": int(round(seconds)),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def number(value):
    """10.0 -> '10', 6.6667 -> '6.67'."""
    return f"{round(value, 2):g}"


def print_scorecard(title, entries):
    width = max([len(entry.name) for entry in entries] + [5])
    print(title)
    print(f"  {'group':<{width}}  {'score':>13}  status")
    for entry in entries:
        score = f"{number(entry.score)}/{number(entry.max_score)}"
        status = "passed" if entry.passed else "FAILED"
        if entry.output.startswith("not graded"):
            status = "not graded"
        print(f"  {entry.name:<{width}}  {score:>13}  {status}")


# --------------------------------------------------------------------------- running programs

@dataclass
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    limit_s: float
    hung_test: str = None  # the test that ran past its own limit (the run was stopped there)


def run_program(command, timeout_s, env=None, merge_stderr=False, test_timeout_s=None):
    """Runs a command from the repository root, killing it (and its children) on timeout.

    With test_timeout_s (a GoogleTest binary, stderr merged), it is also stopped
    when one test runs longer than that: RunResult.hung_test names the test.
    Raises OSError when the program cannot be started at all."""
    process = subprocess.Popen(
        [str(part) for part in command], cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True)  # its own process group, so a timeout kills the whole tree
    if test_timeout_s is not None and merge_stderr:
        return watch_tests(process, timeout_s, test_timeout_s)
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = process.communicate()
    return RunResult(process.returncode, decode(stdout), decode(stderr), timed_out, timeout_s)


def kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def watch_tests(process, timeout_s, test_timeout_s):
    """Waits for a GoogleTest run, reading its output as it comes; kills it when the
    whole run passes timeout_s, or when one test (from its '[ RUN ]' line) runs
    past test_timeout_s: a hang then costs that test, not the whole run."""
    chunks, running = [], [None]  # running[0]: (test, when it started), or None

    def read():
        for raw in iter(process.stdout.readline, b""):
            chunks.append(raw)
            line = decode(raw)
            if line.startswith(GTEST_RUN):
                running[0] = (line[len(GTEST_RUN):].strip(), time.monotonic())
            elif line.startswith(GTEST_RESULTS):
                running[0] = None

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started, hung, limit_s = time.monotonic(), None, timeout_s
    while process.poll() is None:
        now, current = time.monotonic(), running[0]
        if current is not None and now - current[1] > test_timeout_s:
            hung, limit_s = current[0], test_timeout_s
        if hung or now - started > timeout_s:
            kill_group(process)
            break
        time.sleep(0.05)
    process.wait()
    reader.join(timeout=5)
    timed_out = hung is not None or time.monotonic() - started > timeout_s
    return RunResult(process.returncode, decode(b"".join(chunks)), "", timed_out, limit_s, hung)


def decode(data):
    return data.decode("utf-8", errors="replace") if data else ""


def describe_exit(returncode):
    """'SIGSEGV' for a program killed by a signal, else 'exit code N'."""
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


GTEST_BANNERS = ("[==========]", "[----------]", "Running main() from", "Note: Google Test filter")
GTEST_RUN = "[ RUN      ] "
GTEST_RESULTS = ("[       OK ]", "[  FAILED  ]", "[  SKIPPED ]")


def last_output(text):
    """The last lines a program printed, without GoogleTest's banner lines."""
    kept = [line for line in text.splitlines() if not line.startswith(GTEST_BANNERS)]
    return tail("\n".join(kept), LAST_OUTPUT_LINES) or "(none)"


def describe_failed_run(run, running_test=None):
    """'timed out after 2 s' or 'crashed: SIGSEGV while running X, last output: ...'."""
    running_test = run.hung_test or running_test
    where = f" while running {running_test}" if running_test else ""
    if run.hung_test:
        return (f"timed out after {number(run.limit_s)} s{where}: one test may run at most "
                f"{number(run.limit_s)} s (an endless loop or a deadlock? the limit is the "
                f"manifest's test_timeout_s, or --test-timeout)")
    if run.timed_out:
        return f"timed out after {number(run.limit_s)} s{where}"
    last = last_output(run.stdout + run.stderr)
    return f"crashed: {describe_exit(run.returncode)}{where}, last output:\n{last}"


# --------------------------------------------------------------------------- GoogleTest

@dataclass
class TestResult:
    passed: bool
    message: str = ""
    skipped: bool = False
    skip_reason: str = ""  # what the test's GTEST_SKIP() said, when it printed it
    hung: bool = False     # stopped past its own limit (test_timeout_s): not run again


def matches_filter(test_name, gtest_filter):
    """Does 'Suite.Test' match a gtest filter such as 'A.*:B.x-A.slow'?"""
    positive, _, negative = gtest_filter.partition("-")
    def any_match(patterns):
        return any(fnmatch.fnmatchcase(test_name, p) for p in patterns.split(":") if p)
    return any_match(positive or "*") and not any_match(negative)


def is_disabled(test_name):
    suite, _, test = test_name.partition(".")
    return suite.split("/")[-1].startswith("DISABLED_") or test.startswith("DISABLED_")


def read_gtest_json(path):
    """The 'testsuites' list of a gtest JSON report, or None when missing or unreadable."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        suites = report["testsuites"]
        return suites if isinstance(suites, list) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def iterate_tests(suites):
    """Yields ('Suite.Test', test object) for every test in a gtest JSON report."""
    for suite in suites:
        if not isinstance(suite, dict) or not isinstance(suite.get("testsuite"), list):
            continue  # a damaged report: its tests count as not run
        for test in suite["testsuite"]:
            if isinstance(test, dict) and "name" in test:
                yield f"{suite.get('name')}.{test['name']}", test


def test_result(test):
    """Turns one test object of a gtest JSON report into a TestResult (None: did not run)."""
    failures = [f.get("failure", "") for f in test.get("failures", []) if isinstance(f, dict)]
    if failures:
        return TestResult(False, "\n".join(failures))
    if test.get("result") == "SKIPPED":
        return TestResult(False, "skipped (a skipped test earns no points)", skipped=True)
    if test.get("status", "RUN") != "RUN" or test.get("result") == "SUPPRESSED":
        return None
    return TestResult(True)


def running_test_at_end(output):
    """The test gtest had started ('[ RUN      ] X') but not finished when output stopped."""
    current = None
    for line in output.splitlines():
        if line.startswith("[ RUN      ] "):
            current = line[len("[ RUN      ] "):].strip()
        elif current and line.startswith(("[       OK ]", "[  FAILED  ]", "[  SKIPPED ]")) \
                and current in line:
            current = None
    return current


def output_by_test(output):
    """{'Suite.Test': the lines the test printed between its RUN line and its result line}."""
    printed, current = {}, None
    for line in output.splitlines():
        if line.startswith("[ RUN      ] "):
            current = line[len("[ RUN      ] "):].strip()
            printed[current] = []
        elif line.startswith(("[       OK ]", "[  FAILED  ]", "[  SKIPPED ]")):
            current = None
        elif current:
            printed[current].append(line)
    return printed


def skip_reason(lines):
    """The message of a GTEST_SKIP() (the line after 'file:line: Skipped'), or ''."""
    for i, line in enumerate(lines[:-1]):
        if line.rstrip().endswith(": Skipped") and lines[i + 1].strip():
            return lines[i + 1].strip()
    return ""


def explain_results(results, output):
    """Adds what the tests printed to their results: a skipped test's reason, and the
    'not implemented: ...' line an unwritten CUDA kernel prints (it cannot throw)."""
    for name, lines in output_by_test(output).items():
        result = results.get(name)
        if result is None or result.passed:
            continue
        reason = skip_reason(lines)
        if result.skipped and reason:
            result.message = f"skipped: {reason} (a skipped test earns no points)"
            result.skip_reason = reason
        unwritten = [line.strip() for line in lines if line.startswith("not implemented: ")]
        if unwritten and unwritten[0] not in result.message:
            result.message = f"{unwritten[0]}\n{result.message}"


def gtest_environment():
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def list_tests(binary, timeout_s):
    """All enabled test names of a gtest binary; (names, None) or (None, failed RunResult)."""
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        report = Path(scratch) / "list.json"
        run = run_program([binary, "--gtest_list_tests", f"--gtest_output=json:{report}"],
                          timeout_s, gtest_environment(), merge_stderr=True)
        suites = read_gtest_json(report)
    if suites is None or run.timed_out or run.returncode != 0:
        return None, run
    return [name for name, _ in iterate_tests(suites) if not is_disabled(name)], None


def run_tests(binary, gtest_filter, timeout_s, test_timeout_s=None):
    """Runs a gtest binary (optionally filtered); returns ({name: TestResult}, RunResult).
    With test_timeout_s, a test running longer than that stops the run (RunResult.hung_test)."""
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        report = Path(scratch) / "report.json"
        command = [binary, f"--gtest_output=json:{report}"]
        if gtest_filter:
            command.append(f"--gtest_filter={gtest_filter}")
        run = run_program(command, timeout_s, gtest_environment(), merge_stderr=True,
                          test_timeout_s=test_timeout_s)
        suites = read_gtest_json(report)
    results = {}
    for name, test in iterate_tests(suites or []):
        result = test_result(test)
        if result is not None:
            results[name] = result
    explain_results(results, run.stdout)
    if run.hung_test:  # it has no result of its own: the run was stopped in it
        results[run.hung_test] = TestResult(False, describe_failed_run(run), hung=True)
    return results, run


def without_tests(gtest_filter, names):
    """gtest_filter with `names` left out (added to its negative patterns)."""
    if not names:
        return gtest_filter
    joiner = ":" if "-" in gtest_filter else "-"
    return gtest_filter + joiner + ":".join(sorted(names))


class Budget:
    """Seconds left for re-running crashed tests: at most one more timeout_s in all."""

    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds
        self.ran_out = False

    def left(self):
        seconds = max(0.0, self.deadline - time.monotonic())
        self.ran_out = self.ran_out or seconds <= 0
        return seconds


def rerun_after_crash(binary, lab, members, results, budget):
    """Re-runs each group that lost results, then each test of a group that crashed again.

    Fills `results` in place; a test that crashes on its own gets its own crash message
    (the signal's name), and a hung test (past lab.test_timeout_s) is not run again."""
    for group in lab.groups:
        missing = [name for name in members[group.name] if name not in results]
        if not missing or budget.left() <= 0:
            continue
        hung = {name for name in members[group.name] if name in results and results[name].hung}
        found, run = run_tests(binary, without_tests(group.filter, hung),
                               min(lab.timeout_s, budget.left()), lab.test_timeout_s)
        results.update(found)
        missing = [name for name in missing if name not in results]
        if not missing:
            continue
        if run.timed_out and not run.hung_test:  # out of time: no test could run after it
            message = describe_failed_run(run, running_test_at_end(run.stdout))
            if run.limit_s < lab.timeout_s:
                message += " (all the time left for re-runs after the crash)"
            for name in missing:
                results[name] = TestResult(False, message)
            continue
        for name in missing:
            if budget.left() <= 0:
                break
            found, run = run_tests(binary, name, min(lab.timeout_s, budget.left()),
                                   lab.test_timeout_s)
            results.update(found)
            if name not in results:
                results[name] = TestResult(False, describe_failed_run(run, name))


def collect_results(binary, lab, members):
    """Runs the lab's tests; returns {name: TestResult} for every test in some group."""
    graded = {name for names in members.values() for name in names}
    results, run = run_tests(binary, None, lab.timeout_s, lab.test_timeout_s)
    running = run.hung_test or running_test_at_end(run.stdout)
    first_failure = describe_failed_run(run, running)
    # A crash or one hung test: the others can still run. (Out of the whole
    # timeout_s with no test past its own limit: there is no time left for them.)
    if graded - set(results) and (not run.timed_out or run.hung_test):
        how = (f"stopped {run.hung_test}, which ran past {number(lab.test_timeout_s)} s"
               if run.hung_test else
               f"crashed ({describe_exit(run.returncode)}{' in ' + running if running else ''})")
        print(f"grade: the test binary {how}; re-running the affected groups one at a time, "
              f"then the tests of a group that crashes again one by one", file=sys.stderr)
        budget = Budget(lab.timeout_s)
        rerun_after_crash(binary, lab, members, results, budget)
        if budget.ran_out:
            first_failure += (f"\n(this test was not re-run on its own: re-runs after a crash "
                              f"get {number(lab.timeout_s)} s in all, and they were used up)")
    for name in graded - set(results):
        results[name] = TestResult(False, first_failure)
    return results


def group_entry(group, names, results):
    """The scorecard entry of one group: points x passed / tests."""
    if not names:
        return Entry(group.name, 0, group.points, f"no tests matched {group.filter}", passed=False,
                     visibility=group.visibility)
    failed = [name for name in names if not results[name].passed]
    passed = len(names) - len(failed)
    lines = [f"{passed}/{len(names)} tests passed"]
    if failed:
        lines.append("failed: " + ", ".join(failed))
        for name in failed:
            lines.append(f"\n--- {name}\n{results[name].message.strip()}")
    return Entry(group.name, group.points * passed / len(names), group.points, "\n".join(lines),
                 passed=not failed, visibility=group.visibility)


def compilation_entry(max_score, output):
    return Entry("compilation", 0, max_score, output, passed=False)


def grade_tests(binary, lab):
    """The entries of all test groups (or one 'compilation' entry when there is no binary)."""
    group_points = sum(group.points for group in lab.groups)
    binary = Path(binary)
    if not binary.is_file():
        return [compilation_entry(group_points, f"test binary not found: {binary} (did the build succeed?)")]
    try:
        names, failed_listing = list_tests(binary, lab.timeout_s)
    except OSError as error:
        return [compilation_entry(group_points, f"cannot run the test binary {binary}: {error.strerror}")]
    if failed_listing is not None:
        message = "could not list the tests: " + describe_failed_run(failed_listing)
        return [Entry(group.name, 0, group.points, message, passed=False, visibility=group.visibility)
                for group in lab.groups]
    members = {group.name: [n for n in names if matches_filter(n, group.filter)] for group in lab.groups}
    results = collect_results(binary, lab, members)
    if lab.track != "cpu":
        graded = {name for names in members.values() for name in names}
        check_not_all_skipped({name: results[name] for name in graded})
    return [group_entry(group, members[group.name], results) for group in lab.groups]


def check_not_all_skipped(results):
    """A GPU track whose every graded test was skipped ran nowhere: raise NotGraded.
    (Some skipped, some run: graded, and the skipped ones earn nothing, as on the CPU.)"""
    if results and all(result.skipped for result in results.values()):
        reasons = sorted({result.skip_reason or "no reason printed" for result in results.values()})
        raise NotGraded(f"every test was skipped: {'; '.join(reasons)}")


# --------------------------------------------------------------------------- throughput
#
# A timed run can be slowed by anything else the machine does, never sped up
# by it, and a busy core can slow a multi-threaded run many times over (an
# OpenMP thread spins at a barrier while its partner waits for a core). So:
#   - the timed runs use the manifest's `threads` OpenMP threads (default 1):
#     on a machine with a core to spare, one busy core then costs them little;
#   - student and reference alternate, S R, R S, S R, ... (neither always
#     goes first), and each round's ratio compares two runs made moments
#     apart, under the same conditions;
#   - a load probe (Linux /proc/stat, hypervisor steal included) counts the
#     CPU time every other program used during each run. A run during which
#     others used more than OTHER_CORES_ALLOWED beyond the cores this run
#     leaves free is disturbed, and its round is not used;
#   - each round's ratio is noisy even on a quiet machine (run-to-run speed
#     varies by several percent, and the run that comes second in a round can
#     be systematically faster or slower). The ratio is the geometric mean of
#     the median ratio of the student-first rounds and that of the
#     reference-first rounds, so that an order effect cancels;
#   - its uncertainty is estimated from the rounds' spread (a robust standard
#     deviation of the log ratios within each order, Shamos' estimator, at
#     least NOISE_FLOOR, x 1.25 / sqrt(rounds) for a median). A spread needs
#     rounds to measure it: no ratio comes from fewer than
#     MIN_ROUNDS_PER_ORDER rounds of each order, and the standard error is
#     scaled by Student's t(0.975, rounds - 2) / 1.96, since a spread measured
#     from four rounds may be a lucky one and the uncertainty must say so.
#     (Lab 7's rounds vary by 8.5 %; two of them once agreed at 1.108, and the
#     noise floor alone called that ratio certain to 1 %.) Rounds are added, from
#     `repetitions` up to MAX_ROUNDS_FACTOR x repetitions (or --max-rounds),
#     until it is at most RATIO_SE_TARGET (or --target-error);
#   - a machine that disturbs most rounds will not settle a ratio in the
#     rounds left: once 2 x repetitions rounds have run and more than half
#     of them were disturbed, no more are added (it says "machine busy"
#     now, not after four times the repetitions);
#   - when even then it is over RATIO_SE_LIMIT, or too few rounds ran
#     undisturbed, the speed is not graded: the entry says "not graded:
#     machine busy" with the figures, and scores 0 of 0. A score is never
#     computed from disturbed or disagreeing runs. docs/labs.md has the
#     measurements behind these choices.

OTHER_CORES_ALLOWED = 0.1   # CPU cores other programs may use beside a run's free cores
RATIO_SE_TARGET = 0.02      # stop adding rounds once the ratio is this certain (2 %)
RATIO_SE_LIMIT = 0.035      # grade at most this uncertain a ratio, else "machine busy"
NOISE_FLOOR = 0.01          # the smallest run-to-run noise assumed (1 %)
MAX_ROUNDS_FACTOR = 4       # rounds at most: this x repetitions
ORDER_GAP_TO_SETTLE = 0.05  # an order of 2 rounds settles only within 5 % of the other
MIN_ROUNDS_PER_ORDER = 2    # undisturbed rounds of each order before there is any ratio

# Student's t quantile t(0.975, df) for df = 1..30; above that, a series in 1/df.
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
Z_975 = 1.960


def t_975(degrees_of_freedom):
    """Student's t(0.975) for this many degrees of freedom (>= 1)."""
    if degrees_of_freedom <= len(T_975):
        return T_975[degrees_of_freedom - 1]
    return Z_975 + (Z_975 ** 3 + Z_975) / (4 * degrees_of_freedom)


class BenchError(Exception):
    """A bench run that gave no usable number; the message says why."""


@dataclass
class Run:
    """One timed run: its metric values and what the machine did meanwhile."""
    values: list
    seconds: float
    own_cores: float = None    # CPU time of the run (and the grader) / wall time
    other_cores: float = None  # CPU time of every other program / wall time (None: no probe)

    @property
    def value(self):
        return self.values[0]


def probe_cpus():
    """The CPUs this process may run on (its affinity), as /proc/stat names them."""
    try:
        return {f"cpu{i}" for i in os.sched_getaffinity(0)}
    except (AttributeError, OSError):
        return None


def machine_busy_seconds(cpus):
    """CPU seconds the CPUs in `cpus` spent busy (steal included) since boot, or None."""
    try:
        lines = Path("/proc/stat").read_text(encoding="ascii").splitlines()
        ticks_per_s = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    busy = 0
    for line in lines:
        fields = line.split()
        if not fields or fields[0] not in cpus:
            continue
        # user nice system idle iowait irq softirq steal (guest is inside user)
        numbers = [int(x) for x in fields[1:9]]
        busy += sum(numbers) - numbers[3] - numbers[4]
    return busy / ticks_per_s if busy else None


def own_cpu_seconds():
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def timed_run(command, timeout_s, env, metrics):
    """Runs one timed command; returns a Run with the metrics from its JSON output."""
    cpus = probe_cpus()
    busy_before = machine_busy_seconds(cpus) if cpus else None
    own_before, started = own_cpu_seconds(), time.monotonic()
    try:
        run = run_program(command, timeout_s, env)
    except OSError as error:
        raise BenchError(f"cannot run {command[0]}: {error.strerror}") from None
    seconds = max(time.monotonic() - started, 1e-6)
    own = own_cpu_seconds() - own_before
    busy_after = machine_busy_seconds(cpus) if cpus else None
    if run.timed_out:
        raise BenchError(f"timed out after {number(timeout_s)} s")
    if run.returncode != 0:
        raise BenchError(f"{describe_exit(run.returncode)}; last lines of stderr:\n"
                         f"{tail(run.stderr, 10) or '(empty)'}")
    other = None
    if busy_before is not None and busy_after is not None:
        other = max(0.0, (busy_after - busy_before - own) / seconds)
    return Run(json_metrics(run.stdout, metrics), seconds, own / seconds, other)


def json_metrics(stdout, metrics):
    """Each of `metrics` (a field, or a nested one with dots:
    "summary.output_tokens_per_s") from a program's JSON output."""
    try:
        output = json.loads(stdout)
    except ValueError:
        output = None
    values = []
    for metric in metrics:
        try:
            value = output
            for key in metric.split("."):
                value = value[key]
        except (KeyError, TypeError):
            raise BenchError(f"stdout is not a JSON object with a {metric!r} field: "
                             f"{truncate(stdout.strip(), 300)!r}") from None
        if not is_number(value) or value < 0:
            raise BenchError(f"{metric} is {value!r}, not a number >= 0")
        values.append(float(value))
    return values


def timed_environment(spec):
    """The environment of a timed run: the manifest's OpenMP threads, whatever the caller set."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(spec.threads)
    return env


def throughput_points(ratio, spec):
    """Full points at ratio >= full_ratio, none below zero_ratio, linear in between."""
    fraction = (ratio - spec.zero_ratio) / (spec.full_ratio - spec.zero_ratio)
    return spec.points * min(1.0, max(0.0, fraction))


def usable_cpus():
    cpus = probe_cpus()
    return len(cpus) if cpus else (os.cpu_count() or 1)


def cores_in_use(runs, spec, num_cpus):
    """The cores a side's runs keep busy: the manifest's `cores`, or more if the least
    disturbed of its runs used more (a student's code may start threads of its own)."""
    measured = max((run.own_cores for run in runs if run.own_cores is not None), default=0.0)
    return min(num_cpus, max(spec.cores, math.ceil(measured - 0.1)))


@dataclass
class Verdict:
    """What a set of rounds allows: a ratio and its uncertainty, or why there is none."""
    ratio: float = None
    standard_error: float = None                   # of log(ratio): 0.02 is about 2 %
    used: list = field(default_factory=list)       # round indices the ratio comes from
    disturbed: list = field(default_factory=list)  # round indices a busy machine spoiled
    allowed_other_cores: float = None
    reason: str = ""                               # why there is no ratio
    busy: bool = False                             # no ratio because the machine was busy
    order_gap: float = None      # |log| of one order's median ratio over the other's
    smallest_order: int = None   # rounds in the order that has fewer

    def settled(self, target_error=RATIO_SE_TARGET):
        # An order with two rounds has no median that resists an outlier: one
        # disturbance the probe missed moves it by half of that round's error
        # while the rest looks settled. So such a ratio counts only when the two
        # orders agree.
        orders_agree = self.smallest_order is not None and (
            self.smallest_order > MIN_ROUNDS_PER_ORDER or self.order_gap <= ORDER_GAP_TO_SETTLE)
        return (self.ratio is not None and self.standard_error <= target_error
                and orders_agree)


def judge(rounds, spec, num_cpus):
    """The Verdict on `rounds`, a list of (student Run, reference Run); round i ran
    the student first when i is even."""
    allowed = {}
    for side in (0, 1):
        in_use = cores_in_use([pair[side] for pair in rounds], spec, num_cpus)
        allowed[side] = max(0, num_cpus - in_use) + OTHER_CORES_ALLOWED
    verdict = Verdict(allowed_other_cores=min(allowed.values()))
    if any(pair[1].value <= 0 for pair in rounds):
        verdict.reason = f"the reference reported {spec.metric} = 0; cannot compare"
        return verdict
    logs = {}
    for index, pair in enumerate(rounds):
        if any(run.other_cores is not None and run.other_cores > allowed[side]
               for side, run in enumerate(pair)):
            verdict.disturbed.append(index)
        else:
            logs[index] = math.log(max(pair[0].value, 1e-12) / pair[1].value)
    by_order = [[logs[i] for i in logs if i % 2 == 0], [logs[i] for i in logs if i % 2 == 1]]
    if len(logs) < spec.repetitions or min(map(len, by_order)) < MIN_ROUNDS_PER_ORDER:
        verdict.reason = (f"only {len(logs)} of {len(rounds)} rounds ran undisturbed "
                          f"({max(spec.repetitions, 2 * MIN_ROUNDS_PER_ORDER)} needed, "
                          f"{MIN_ROUNDS_PER_ORDER} of each order)")
        verdict.busy = True
        return verdict
    centers = [statistics.median(group) for group in by_order]
    verdict.ratio = math.exp(sum(centers) / 2)
    verdict.order_gap = abs(centers[0] - centers[1])
    verdict.smallest_order = min(len(group) for group in by_order)
    verdict.standard_error = ratio_standard_error(by_order)
    verdict.used = sorted(logs)
    return verdict


def ratio_standard_error(by_order):
    """The standard error of log(ratio), from the spread of the log ratios within
    each order (each order has MIN_ROUNDS_PER_ORDER rounds or more)."""
    # Shamos' estimator: 1.0483 x the median of |x_i - x_j| over the pairs of
    # rounds of one order is the standard deviation for normal noise, ignores
    # the order effect, and resists outliers like the median absolute
    # deviation does -- but, unlike deviations from an order's own median,
    # has no zero term from the median round itself.
    differences = [abs(a - b) for group in by_order for a, b in itertools.combinations(group, 2)]
    noise = max(1.0483 * statistics.median(differences), NOISE_FLOOR)
    rounds = sum(len(group) for group in by_order)
    degrees_of_freedom = rounds - len(by_order)
    return 1.25 * noise / math.sqrt(rounds) * t_975(degrees_of_freedom) / Z_975


def mostly_disturbed(rounds, verdict, spec):
    """True once 2 x repetitions rounds ran and a busy machine spoiled most of them."""
    return len(rounds) >= 2 * spec.repetitions and 2 * len(verdict.disturbed) > len(rounds)


def measure_rounds(spec, one_round):
    """Calls one_round(index) -> (student Run, reference Run) until judge() gives a
    settled ratio (at least spec.repetitions rounds), spec.round_limit() rounds
    were run, or most rounds were disturbed; returns (rounds, verdict), the verdict
    without a ratio (busy) when the last one is still over RATIO_SE_LIMIT."""
    num_cpus = usable_cpus()
    rounds = []
    verdict = Verdict()
    for index in range(spec.round_limit()):
        rounds.append(one_round(index))
        if len(rounds) >= spec.repetitions:
            verdict = judge(rounds, spec, num_cpus)
            if verdict.settled(spec.target_error or RATIO_SE_TARGET):
                return rounds, verdict
            if mostly_disturbed(rounds, verdict, spec):
                break
    if verdict.ratio is not None and verdict.standard_error > RATIO_SE_LIMIT:
        verdict.reason = (f"the undisturbed rounds disagree: ratio {verdict.ratio:.3f} with a "
                          f"standard error of {verdict.standard_error:.1%} after {len(rounds)} "
                          f"rounds (at most {RATIO_SE_LIMIT:.1%} is graded)")
        verdict.ratio, verdict.busy = None, True
    return rounds, verdict


def alternating(index, first, second):
    """Round 0: first, second; round 1: second, first; ... (A B, B A, A B, ...)."""
    return (first, second) if index % 2 == 0 else (second, first)


def measure(spec, student_cli, reference_cli, args):
    """Runs student and reference CLIs alternately; returns (rounds, verdict)."""
    env = timed_environment(spec)

    def one_round(index):
        runs = {}
        for who in alternating(index, "student", "reference"):
            cli = student_cli if who == "student" else reference_cli
            try:
                runs[who] = timed_run([cli, *args], spec.timeout_s, env, [spec.metric])
            except BenchError as error:
                raise BenchError(f"the {who} CLI failed: {error}") from None
        return runs["student"], runs["reference"]
    return measure_rounds(spec, one_round)


def measure_in_process(spec, program, args):
    """Runs the throughput program, which times both kernels itself, in one process;
    each run is one round: (student Run, reference Run) of the same process."""
    env = timed_environment(spec)

    def one_round(_index):
        try:
            run = timed_run([program, *args], spec.timeout_s, env,
                            [spec.metric, spec.reference_metric])
        except BenchError as error:
            raise BenchError(f"the throughput program {Path(program).name} failed: {error}") from None
        student = Run([run.values[0]], run.seconds, run.own_cores, run.other_cores)
        reference = Run([run.values[1]], run.seconds, run.own_cores, run.other_cores)
        return student, reference
    return measure_rounds(spec, one_round)


def describe_rounds(rounds, verdict, order):
    """One line per round: both values, the ratio, the load, whether it was used."""
    lines = []
    for index, (student, reference) in enumerate(rounds):
        first, _ = alternating(index, *order)
        values = (f"student {student.value:.4g}, reference {reference.value:.4g}"
                  if first == "student" else
                  f"reference {reference.value:.4g}, student {student.value:.4g}")
        ratio = student.value / reference.value if reference.value > 0 else float("nan")
        loads = [run.other_cores for run in (student, reference) if run.other_cores is not None]
        load = f"; other programs {max(loads):.2f} cores" if loads else ""
        if index in verdict.disturbed:
            mark = " (disturbed: not used)"
        elif index in verdict.used:
            mark = " (used)"
        else:
            mark = ""
        lines.append(f"  round {index + 1}: {values}: ratio {ratio:.3f}{load}{mark}")
    return lines


def busy_figures(rounds, verdict):
    """'other programs used 0.95-1.02 cores during 7 of 9 rounds (0.10 allowed ...)'."""
    loads = [max(run.other_cores for run in pair if run.other_cores is not None)
             for pair in rounds if any(run.other_cores is not None for run in pair)]
    if not loads:
        return "no load probe on this system (/proc/stat)"
    disturbed = [loads[i] for i in verdict.disturbed if i < len(loads)]
    if not disturbed:
        return f"other programs used at most {max(loads):.2f} cores"
    return (f"other programs used {min(disturbed):.2f}-{max(disturbed):.2f} CPU cores during "
            f"{len(disturbed)} of {len(rounds)} rounds, where {verdict.allowed_other_cores:.2f} "
            f"are allowed beside the cores the runs use")


def grade_throughput(spec, student_cli, reference_cli, model, student_program=None,
                     program_args=(), rerun_hint="make grade"):
    """The speed entry, the leaderboard (empty when there is no ratio), and whether it
    was graded (False: the machine was too busy to time; the entry scores 0 of 0)."""
    def failed(message):
        return Entry(spec.name, 0, spec.points, message, passed=False), [], True

    heading = ""
    try:
        if spec.program:
            if not Path(student_program).is_file():
                return failed(f"throughput program not found: {student_program}")
            args = [*spec.args, *program_args]
            rounds, verdict = measure_in_process(spec, student_program, args)
            heading = (f"{Path(student_program).name} {' '.join(args)}: your kernel "
                       f"({spec.metric}) against the reference kernel ({spec.reference_metric}), "
                       f"timed in the same runs")
            order = ("student", "reference")
        else:
            if not Path(model).is_file():
                return failed(f"model not found: {model} (python3 tools/fetch_model.py downloads it)")
            for who, cli in (("student", student_cli), ("reference", reference_cli)):
                if not Path(cli).is_file():
                    return failed(f"{who} CLI not found: {cli}")
            args = [arg.replace("{model}", str(Path(model).resolve())) for arg in spec.args]
            rounds, verdict = measure(spec, student_cli, reference_cli, args)
            heading = (f"{spec.metric} of the student's CLI and the reference's, alternating "
                       f"(student first in odd rounds)")
            order = ("student", "reference")
    except BenchError as error:
        return failed(str(error))
    threads = f"{spec.threads} OpenMP thread{'s' if spec.threads != 1 else ''}"
    lines = [f"{heading}; {threads}, {len(rounds)} rounds:",
             *describe_rounds(rounds, verdict, order)]
    student = [pair[0].value for pair in rounds]
    reference = [pair[1].value for pair in rounds]
    lines.append(f"student median {statistics.median(student):.4g} (runs {fmt_runs(student)}), "
                 f"reference median {statistics.median(reference):.4g} (runs {fmt_runs(reference)})")
    if verdict.ratio is None:
        if verdict.busy:
            lines.insert(0, f"not graded: machine busy ({verdict.reason}; "
                            f"{busy_figures(rounds, verdict)}). No score was computed from "
                            f"disturbed runs: re-run `{rerun_hint}` when the machine is quiet")
            return Entry(spec.name, 0, 0, "\n".join(lines), passed=False), [], False
        return Entry(spec.name, 0, spec.points, f"{verdict.reason}\n" + "\n".join(lines),
                     passed=False), [], True
    lines.append(f"ratio {verdict.ratio:.3f} +- {verdict.standard_error:.1%}: the geometric mean "
                 f"of the median ratios of the student-first and the reference-first rounds, "
                 f"{len(verdict.used)} undisturbed rounds; {busy_figures(rounds, verdict)}")
    lines.append(f"full points at ratio >= {spec.full_ratio:.3f}, none below {spec.zero_ratio:.3f}")
    entry = Entry(spec.name, throughput_points(verdict.ratio, spec), spec.points, "\n".join(lines))
    return entry, [{"name": spec.name, "value": round(verdict.ratio, 4), "order": "desc"}], True


def fmt_runs(values):
    return ", ".join(f"{v:.4g}" for v in values)


# --------------------------------------------------------------------------- build

def cuda_unavailable(build_dir):
    """Why `build_dir` has no CUDA targets (configured without CUDA), or None.

    Read from its CMakeCache.txt: SERVELAB_CUDA=OFF, or no CMAKE_CUDA_COMPILER
    (check_language(CUDA) found no nvcc). None also when there is no cache
    yet: the build then says what is wrong."""
    try:
        lines = (Path(build_dir) / "CMakeCache.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    cache = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith(("#", "//")))
    cache = {key.split(":")[0]: value for key, value in cache.items()}
    if cache.get("SERVELAB_CUDA", "ON").upper() in ("OFF", "0", "FALSE", "NO"):
        return f"{build_dir} was configured with SERVELAB_CUDA=OFF (CPU only)"
    compiler = cache.get("CMAKE_CUDA_COMPILER", "")
    if not compiler or compiler.endswith("NOTFOUND"):
        return f"{build_dir} was configured without CUDA: nvcc was not found"
    return None


def build(build_dir, lab):
    """Builds the lab's targets; returns None on success, else a failing 'compilation' entry."""
    clis = [f"servelab-{lab.tag}", "servelab"] if lab.track == "cpu" or lab.throughput else []
    if lab.throughput and lab.throughput.program:
        clis.append(lab.throughput_target)
    command = ["cmake", "--build", str(build_dir), "--target", lab.test_target, *clis]
    print(f"grade: {' '.join(command)}", file=sys.stderr)
    try:
        run = run_program(command, BUILD_TIMEOUT_S, merge_stderr=True)
    except OSError as error:
        return compilation_entry(lab.max_score, f"cannot run cmake: {error.strerror}")
    if run.returncode == 0 and not run.timed_out:
        return None
    status = "timed out" if run.timed_out else describe_exit(run.returncode)
    return compilation_entry(lab.max_score,
                             f"build failed ({status}); last lines of the build output:\n"
                             f"{build_log_excerpt(run.stdout)}")


COMMAND_LINE_CHARS = 300  # a build output line longer than this, with " -c ", echoes a command


def build_log_excerpt(output):
    """The build output's last lines as a student needs them: the compiler's
    messages, not the commands the build tool echoes before them (one such line
    is longer than a whole entry may be), and the end kept when it is too long,
    since the errors come last."""
    lines = []
    for line in output.splitlines():
        if not line.strip():
            continue
        if len(line) > COMMAND_LINE_CHARS and " -c " in line:
            line = "(the compile command)"
        lines.append(line)
    text = "\n".join(lines[-BUILD_LOG_LINES:])
    room = OUTPUT_LIMIT - 150  # the entry's first line and the truncation note
    if len(text) > room:
        text = "... (earlier lines left out)\n" + text[-room:].split("\n", 1)[-1]
    return text


# --------------------------------------------------------------------------- main

def parse_args(argv):
    parser = argparse.ArgumentParser(description="Grade one servelab lab; writes results.json.")
    parser.add_argument("--lab", type=int, required=True, help="lab number, e.g. 1")
    parser.add_argument("--track", choices=sorted(TRACK_MANIFESTS), default="cpu",
                        help="cpu (manifest.json) or cuda (manifest_cuda.json, needs a GPU)")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--student-tests", type=Path,
                        help="default BUILD/labNN_tests (cuda track: BUILD/labNN_cuda_tests)")
    parser.add_argument("--student-cli", type=Path, help="default BUILD/servelab-labNN")
    parser.add_argument("--reference-cli", type=Path, help="default BUILD/servelab")
    parser.add_argument("--student-program", type=Path,
                        help="a manifest's throughput program, default BUILD/labNN_throughput")
    parser.add_argument("--manifest", type=Path,
                        help="default labs/labNN_<name>/manifest.json (cuda: manifest_cuda.json)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="replaces {model} in bench args")
    parser.add_argument("--out", type=Path,
                        help="default labs/labNN_<name>/results.json (cuda: results_cuda.json)")
    parser.add_argument("--no-build", action="store_true", help="grade the binaries as they are")
    parser.add_argument("--repetitions", type=int,
                        help="undisturbed rounds the speed ratio needs (overrides the manifest)")
    parser.add_argument("--max-rounds", type=int,
                        help="timed rounds at most (default 4 x the repetitions; never fewer "
                             "than the repetitions)")
    parser.add_argument("--target-error", type=float, metavar="PERCENT",
                        help=f"add rounds until the ratio's standard error is at most this "
                             f"percent (default {RATIO_SE_TARGET * 100:g}; at most "
                             f"{RATIO_SE_LIMIT * 100:g}, the most that is graded)")
    parser.add_argument("--program-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for the throughput program (--program-arg=--x=1)")
    parser.add_argument("--skip-throughput", action="store_true",
                        help="grade the tests only (the maximum leaves out the speed points)")
    parser.add_argument("--group", action="append", default=[], metavar="NAME",
                        help="grade only this group (the start of its name; repeatable); "
                             "implies --skip-throughput")
    parser.add_argument("--skip-if-busy", action="store_true",
                        help="exit 77 (ctest's SKIPPED) when the speed could not be timed "
                             "because the machine was busy, and the rest met the thresholds")
    parser.add_argument("--test-timeout", type=float, metavar="S",
                        help=f"one test's limit in seconds: a test running longer is stopped "
                             f"as hung and the others run without it (default: the "
                             f"manifest's test_timeout_s, else {DEFAULT_TEST_TIMEOUT_S})")
    parser.add_argument("--min-score", type=float, help="exit 1 if the score is below this percent")
    parser.add_argument("--max-score", type=float, help="exit 1 if the score is above this percent")
    args = parser.parse_args(argv)
    # Programs run from the repository root: paths given relative to where the
    # grader was started must not change meaning there.
    for name in ("build_dir", "student_tests", "student_cli", "reference_cli", "student_program",
                 "manifest", "model", "out"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    if args.lab < 1:
        parser.error("--lab must be >= 1")
    if args.repetitions is not None and args.repetitions < 1:
        parser.error("--repetitions must be >= 1")
    if args.test_timeout is not None and not args.test_timeout > 0:
        parser.error("--test-timeout must be > 0")
    if args.target_error is not None and not 0 < args.target_error <= RATIO_SE_LIMIT * 100:
        parser.error(f"--target-error must be in (0, {RATIO_SE_LIMIT * 100:g}] percent")
    return args


def select_groups(lab, prefixes):
    """Keeps only the groups named by `prefixes` (each the start of exactly one name)."""
    chosen = []
    for prefix in prefixes:
        matches = [group for group in lab.groups if group.name.startswith(prefix)]
        if len(matches) != 1:
            raise ManifestError(f"--group {prefix!r} must start exactly one group's name; it "
                                f"starts {len(matches)} (groups: "
                                f"{'; '.join(group.name for group in lab.groups)})")
        if matches[0] not in chosen:
            chosen.append(matches[0])
    lab.groups = chosen


@dataclass
class Grade:
    entries: list
    leaderboard: list = field(default_factory=list)
    speed_graded: bool = True  # False: the machine was too busy to time the speed


def grade(lab, args):
    """Builds (unless --no-build) and grades; returns a Grade."""
    build_dir = args.build_dir
    if lab.track == "cuda" and args.student_tests is None:
        reason = cuda_unavailable(build_dir)
        if reason:
            raise NotGraded(f"the CUDA track is unavailable: {reason}")
    if args.group:
        select_groups(lab, args.group)
    if args.skip_throughput or args.group:
        lab.throughput = None
    if args.test_timeout is not None:
        lab.test_timeout_s = args.test_timeout
    if not args.no_build:
        failure = build(build_dir, lab)
        if failure is not None:
            return Grade([failure])
    print(f"grade: running the {lab.test_target} tests", file=sys.stderr)
    result = Grade(grade_tests(args.student_tests or build_dir / lab.test_target, lab))
    if lab.throughput is not None:
        if args.repetitions is not None:
            lab.throughput.repetitions = args.repetitions
        lab.throughput.max_rounds = args.max_rounds
        if args.target_error is not None:
            lab.throughput.target_error = args.target_error / 100
        print(f"grade: measuring {lab.throughput.metric} ({lab.throughput.repetitions}+ rounds, "
              f"{lab.throughput.threads} thread(s))", file=sys.stderr)
        track = "" if lab.track == "cpu" else f" TRACK={lab.track}"
        entry, result.leaderboard, result.speed_graded = grade_throughput(
            lab.throughput, args.student_cli or build_dir / f"servelab-{lab.tag}",
            args.reference_cli or build_dir / "servelab", args.model,
            args.student_program or build_dir / lab.throughput_target, args.program_arg,
            rerun_hint=f"make grade LAB={lab.number}{track}")
        result.entries.append(entry)
    return result


def default_out(args):
    """Where results.json goes when the manifest could not be read."""
    folder = find_lab_folder(args.lab)
    name = "results.json" if args.track == "cpu" else f"results_{args.track}.json"
    return (folder / name) if folder else Path(name)


def threshold_exit_code(args, entries):
    maximum = sum(entry.max_score for entry in entries)
    percent = 100.0 * total_score(entries) / maximum if maximum > 0 else 0.0
    if args.min_score is not None and percent < args.min_score:
        print(f"grade: {percent:.1f}% is below --min-score {number(args.min_score)}%", file=sys.stderr)
        return 1
    if args.max_score is not None and percent > args.max_score:
        print(f"grade: {percent:.1f}% is above --max-score {number(args.max_score)}%", file=sys.stderr)
        return 1
    return 0


def summary_line(args, lab, result, not_graded):
    """The scorecard's last line, `lab NN: S/M points`, also results.json's top-level output."""
    track = "" if args.track == "cpu" else f" {args.track} track"
    if not_graded is not None:
        return f"lab {args.lab:02d}{track}: not graded: {not_graded}"
    entries = result.entries
    maximum = sum(entry.max_score for entry in entries)
    line = f"lab {args.lab:02d}{track}: {number(total_score(entries))}/{number(maximum)} points"
    if not result.speed_graded:
        line += " (speed not graded: machine busy)"
    if lab is not None and lab.hidden_points:
        line += (f"; the course's autograder also runs hidden tests worth "
                 f"{number(lab.hidden_points)} points")
    return line


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()
    lab, result, grader_failed, not_graded = None, Grade([]), False, None
    try:
        lab = load_lab(args.lab, args.manifest, args.track)
        result = grade(lab, args)
    except NotGraded as error:  # no score at all, rather than a zero that looks earned
        not_graded = str(error)
        result = Grade([Entry("not graded", 0, 0, f"not graded on this machine: {not_graded}",
                              passed=False)])
    except ManifestError as error:
        print(f"grade.py: error: {error}", file=sys.stderr)
        result, grader_failed = Grade([Entry("grader error", 0, 0, str(error), passed=False)]), True
    except Exception:  # the grade must still be written, whatever went wrong
        details = traceback.format_exc()
        print(details, file=sys.stderr, end="")
        max_score = lab.max_score if lab else 0
        result = Grade([Entry("grader error", 0, max_score, details, passed=False)])
        grader_failed = True
    entries = result.entries
    out = args.out or (lab.folder / lab.results_name if lab else default_out(args))
    summary = summary_line(args, lab, result, not_graded)
    write_results(out, entries, result.leaderboard, time.monotonic() - started, summary)
    if not_graded is not None:
        print(summary)
        print(f"grade: wrote {out}", file=sys.stderr)
        return NOT_GRADED_EXIT
    print_scorecard(lab.title if lab else f"lab {args.lab:02d}", entries)
    if not result.speed_graded:
        print(f"speed {entries[-1].output.splitlines()[0]}")
    print(summary)
    print(f"grade: wrote {out}", file=sys.stderr)
    if grader_failed:
        return 2
    status = threshold_exit_code(args, entries)
    if status == 0 and args.skip_if_busy and not result.speed_graded:
        print("grade: the speed could not be timed on this busy machine: skipped (77)",
              file=sys.stderr)
        return NOT_GRADED_EXIT
    return status


if __name__ == "__main__":
    sys.exit(main())
