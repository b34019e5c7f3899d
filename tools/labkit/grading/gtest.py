"""gtest.py — stage 2 of a grade: the lab's GoogleTest binary, scored by manifest group.

Part of the autograder (tools/labkit/grade.py; docs/labs.md). Runs the binary
once with --gtest_output=json; a group scores points x (passed / tests in the
group). When the binary crashes, the groups that lost results run again alone,
and a group that crashes too runs test by test, so one crashing test does not
zero the others. Also the gtest-style filter matching the manifests use.
"""
import fnmatch
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import NotGraded
from .results import Entry, number
from .process import describe_exit, describe_failed_run, run_program


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
