#!/usr/bin/env python3
"""test_grade.py — unit tests of the autograder, tools/labkit/grade.py.

No real lab build is needed: each test makes fakes in a temporary folder.

  fake test binary  a Python script that behaves like a GoogleTest binary
                    (--gtest_list_tests, --gtest_filter, --gtest_output=json:PATH);
                    each fake test passes, fails, skips, crashes (SIGSEGV),
                    exits early or hangs, as the test says.
  fake CLI          a Python script that prints `bench` JSON with a given
                    decode_tokens_per_s, or fails like an unfinished lab.
  manifest          a temporary labs/labNN_<name>/manifest.json.

Every fake appends one line per call to a log file, so tests can check which
runs the grader made and in what order. Run: python3 tests/tools/test_grade.py
"""
import contextlib
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import statistics
import unittest
from unittest import mock
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GRADE_PY = REPO_ROOT / "tools" / "labkit" / "grade.py"
sys.dont_write_bytecode = True  # keep tools/labkit/ free of __pycache__
sys.path.insert(0, str(GRADE_PY.parent))
import grade  # noqa: E402  (the command under test: its main)
import grading.build  # noqa: E402
import grading.cli  # noqa: E402
import grading.gtest  # noqa: E402
import grading.manifest  # noqa: E402
import grading.results  # noqa: E402
import grading.timing  # noqa: E402

# A GoogleTest look-alike. OUTCOMES maps "Suite.Test" to what the test does.
FAKE_GTEST = r'''#!{python}
import fnmatch, json, os, signal, sys, time

OUTCOMES = json.loads({outcomes!r})
LOG = {log!r}


def matches(name, gtest_filter):
    positive, _, negative = gtest_filter.partition("-")
    hit = lambda patterns: any(fnmatch.fnmatchcase(name, p) for p in patterns.split(":") if p)
    return hit(positive or "*") and not hit(negative)


def write_report(path, tests):
    suites = {{}}
    for name, fields in tests:
        suite, _, test = name.partition(".")
        suites.setdefault(suite, []).append(dict(name=test, classname=suite, **fields))
    report = {{"name": "AllTests", "testsuites": [
        {{"name": suite, "tests": len(entries), "testsuite": entries}} for suite, entries in suites.items()]}}
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


args = sys.argv[1:]
report_path = next((a.split("json:", 1)[1] for a in args if a.startswith("--gtest_output=json:")), None)
gtest_filter = next((a.split("=", 1)[1] for a in args if a.startswith("--gtest_filter=")), "*")
with open(LOG, "a") as log:
    log.write("tests " + " ".join(a for a in args if not a.startswith("--gtest_output")) + "\n")
selected = [name for name in OUTCOMES if matches(name, gtest_filter)]

if "--gtest_list_tests" in args:
    write_report(report_path, [(name, {{}}) for name in selected])
    sys.exit(0)

results, any_failed = [], False
for name in selected:
    print("[ RUN      ] " + name, flush=True)
    outcome = OUTCOMES[name]
    if outcome == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if outcome == "hang":
        time.sleep(60)
    if outcome == "exit0":
        sys.exit(0)
    fields = {{"status": "RUN", "result": "COMPLETED"}}
    if outcome == "fail":
        fields["failures"] = [{{"failure": "fake.cpp:7\nExpected equality of these values:\n  1\n  2", "type": ""}}]
        any_failed = True
    if outcome == "skip":  # as GTEST_SKIP() << "no usable GPU: ..." prints it
        fields["result"] = "SKIPPED"
        print("fake.cpp:12: Skipped\nno usable GPU: fake driver is missing\n", flush=True)
    if outcome == "unwritten":  # a skeleton CUDA kernel: prints, writes nothing, the test fails
        print("not implemented: lab01: fake_kernel (this kernel writes nothing)", flush=True)
        fields["failures"] = [{{"failure": "fake.cpp:9\nout[0]: gpu nan, cpu 1", "type": ""}}]
        any_failed = True
    if outcome == "disabled":
        fields = {{"status": "NOTRUN", "result": "SUPPRESSED"}}
    results.append((name, fields))
    status = {{"fail": "[  FAILED  ] ", "unwritten": "[  FAILED  ] ", "skip": "[  SKIPPED ] "}}
    print(status.get(outcome, "[       OK ] ") + name, flush=True)
write_report(report_path, results)
sys.exit(1 if any_failed else 0)
'''

# A `servelab bench` look-alike: prints VALUE as decode_tokens_per_s, or fails.
FAKE_CLI = r'''#!{python}
import json, sys

import os
with open({log!r}, "a") as log:
    log.write({who!r} + "\n")
with open({log!r} + ".env", "a") as log:
    log.write(os.environ.get("OMP_NUM_THREADS", "unset") + "\n")
if {fail!r}:
    print("[20:21:38.800] info loading", file=sys.stderr)
    print("servelab: internal error: not implemented: lab01: rmsnorm", file=sys.stderr)
    sys.exit(1)
print(json.dumps({{"prefill_tokens_per_s": 100.0, "decode_tokens_per_s": {value!r},
                  "latency_by_position": [{{"position": 16, "latency_ms": 3.0}}]}}, indent=2))
'''

THROUGHPUT = {"name": "Decode speed", "points": 10,
              "args": ["bench", "--model", "{model}", "--prompt-tokens", "16", "--gen-tokens", "16"],
              "metric": "decode_tokens_per_s", "repetitions": 3, "full_ratio": 0.8333, "zero_ratio": 0.1}


class GraderTestCase(unittest.TestCase):
    """A temporary folder with a manifest, fakes, a model file and a call log."""

    def setUp(self):
        # No load probe: whatever else the machine runs (ctest runs tests side
        # by side) must not change these tests' timed rounds.
        probe = mock.patch.object(grading.timing, "machine_busy_seconds", return_value=None)
        probe.start()
        self.addCleanup(probe.stop)
        self._scratch = tempfile.TemporaryDirectory(prefix="test_grade-")
        self.dir = Path(self._scratch.name)
        self.log = self.dir / "calls.log"
        self.log.touch()
        self.model = self.dir / "model.gguf"
        self.model.write_bytes(b"GGUF")
        self.out = self.dir / "results.json"
        self.manifest = self.dir / "manifest.json"
        self.tests_binary = self.dir / "lab01_tests"

    def tearDown(self):
        self._scratch.cleanup()

    def make_script(self, path, text):
        path.write_text(text)
        path.chmod(0o755)
        return path

    def fake_tests(self, outcomes):
        text = FAKE_GTEST.format(python=sys.executable, outcomes=json.dumps(outcomes), log=str(self.log))
        return self.make_script(self.tests_binary, text)

    def fake_cli(self, name, value=1.0, fail=False):
        text = FAKE_CLI.format(python=sys.executable, log=str(self.log), who=name, value=value, fail=fail)
        return self.make_script(self.dir / name, text)

    def write_manifest(self, groups, throughput=None, timeout_s=20, track=None):
        manifest = {"lab": 1, "name": "fake", "timeout_s": timeout_s, "groups": groups}
        if track is not None:
            manifest["track"] = track
        if throughput is not None:
            manifest["throughput"] = throughput
        self.manifest.write_text(json.dumps(manifest))

    def logged(self):
        return self.log.read_text().splitlines()

    def grade(self, *extra, build=False):
        """Runs grade.main in this process; returns (exit code, results.json, stdout, stderr)."""
        argv = ["--lab", "1", "--manifest", str(self.manifest), "--out", str(self.out),
                "--student-tests", str(self.tests_binary), "--model", str(self.model),
                "--student-cli", str(self.dir / "student"), "--reference-cli", str(self.dir / "reference")]
        if not build:
            argv.append("--no-build")
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = grade.main(argv + list(extra))
        results = json.loads(self.out.read_text()) if self.out.exists() else None
        return code, results, stdout.getvalue(), stderr.getvalue()

    def entry(self, results, name):
        return next(test for test in results["tests"] if test["name"] == name)


class TestGroupScoring(GraderTestCase):

    def test_partial_credit_per_group(self):
        self.fake_tests({"Norm.Ones": "pass", "Norm.Zeros": "fail", "Norm.Big": "pass",
                         "Rope.A": "pass", "Rope.B": "pass", "Attn.Skipped": "skip", "Attn.Ok": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 9},
                             {"name": "Rope", "filter": "Rope.*", "points": 4},
                             {"name": "Attention", "filter": "Attn.*", "points": 10}])
        code, results, stdout, _ = self.grade()
        self.assertEqual(code, 0)
        norm, rope, attn = (self.entry(results, n) for n in ("Norm", "Rope", "Attention"))
        self.assertEqual((norm["score"], norm["max_score"], norm["status"]), (6, 9, "failed"))
        self.assertIn("2/3 tests passed", norm["output"])
        self.assertIn("Norm.Zeros", norm["output"])
        self.assertIn("Expected equality of these values", norm["output"])
        self.assertEqual((rope["score"], rope["status"]), (4, "passed"))
        self.assertEqual(attn["score"], 5)  # a skipped test earns nothing
        self.assertIn("skipped", attn["output"])
        self.assertEqual((results["score"], results["max_score"]), (15, 23))
        self.assertIn("lab 01: 15/23 points", stdout.splitlines()[-1])
        self.assertEqual(len(self.logged()), 2, "one listing run and one test run")

    def test_group_without_matching_tests_scores_zero(self):
        self.fake_tests({"Norm.Ones": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5},
                             {"name": "Missing", "filter": "Nope.*", "points": 5}])
        _, results, _, _ = self.grade()
        missing = self.entry(results, "Missing")
        self.assertEqual((missing["score"], missing["status"]), (0, "failed"))
        self.assertEqual(missing["output"], "no tests matched Nope.*")
        self.assertEqual(results["score"], 5)

    def test_disabled_tests_do_not_count(self):
        self.fake_tests({"Norm.Ones": "pass", "Norm.DISABLED_Slow": "disabled"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}])
        _, results, _, _ = self.grade()
        self.assertEqual(self.entry(results, "Norm")["score"], 5)

    def test_output_is_truncated(self):
        limit = grading.results.OUTPUT_LIMIT
        self.assertLessEqual(len(grading.results.truncate("x" * 10000, limit)), limit)
        self.assertEqual(grading.results.truncate("short", limit), "short")


class TestGroupSelection(GraderTestCase):

    def test_one_group_by_the_start_of_its_name_and_no_speed(self):
        self.fake_tests({"Norm.A": "pass", "Rope.A": "fail", "Rope.B": "pass"})
        self.fake_cli("reference", value=100.0)
        self.fake_cli("student", value=100.0)
        self.write_manifest([{"name": "RMSNorm kernel", "filter": "Norm.*", "points": 5},
                             {"name": "RoPE rotation", "filter": "Rope.*", "points": 4}],
                            throughput=THROUGHPUT)
        code, results, _, _ = self.grade("--group", "RoPE")
        self.assertEqual(code, 0)
        self.assertEqual([t["name"] for t in results["tests"]], ["RoPE rotation"])
        self.assertEqual((results["score"], results["max_score"]), (2, 4))
        self.assertEqual([l for l in self.logged() if not l.startswith("tests")], [])

    def test_a_prefix_that_names_no_single_group_is_an_error(self):
        self.fake_tests({"Norm.A": "pass"})
        self.write_manifest([{"name": "Norm one", "filter": "Norm.*", "points": 5},
                             {"name": "Norm two", "filter": "Norm.*", "points": 5}])
        code, results, _, stderr = self.grade("--group", "Norm")
        self.assertEqual(code, 2)
        self.assertIn("--group 'Norm' must start exactly one group's name", stderr)


class TestFilterMatching(unittest.TestCase):

    def test_gtest_patterns(self):
        cases = [("Norm.Ones", "Norm.*", True),
                 ("NormX.Ones", "Norm.*", False),
                 ("Norm.Ones", "Norm.Ones", True),
                 ("Norm.Ones", "Norm.One", False),
                 ("Rope.A", "Norm.*:Rope.*", True),
                 ("Norm.Slow", "Norm.*-Norm.Slow", False),
                 ("Norm.Fast", "Norm.*-Norm.Slow:Norm.Slower", True),
                 ("Norm.Fast", "-Norm.Slow", True),
                 ("Inst/Attn.Causal/3", "Inst/Attn.*", True),
                 ("Inst/Attn.Causal/3", "*/Attn.Causal/*", True),
                 ("Lab01Norm.A1", "Lab01Norm.A?", True),
                 ("lab01norm.a", "Lab01Norm.*", False)]
        for name, gtest_filter, expected in cases:
            with self.subTest(name=name, filter=gtest_filter):
                self.assertEqual(grading.gtest.matches_filter(name, gtest_filter), expected)


class TestCrashesAndTimeouts(GraderTestCase):

    def test_crash_falls_back_to_groups_then_tests(self):
        self.fake_tests({"Norm.A": "pass", "Norm.B": "pass",
                         "Attn.Ok": "pass", "Attn.Boom": "crash", "Attn.Bad": "fail", "Attn.Quits": "exit0",
                         "Rope.A": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 10},
                             {"name": "Attention", "filter": "Attn.*", "points": 8},
                             {"name": "Rope", "filter": "Rope.*", "points": 3}])
        code, results, _, _ = self.grade()
        self.assertEqual(code, 0)
        self.assertEqual(self.entry(results, "Norm")["score"], 10)
        self.assertEqual(self.entry(results, "Rope")["score"], 3)
        attention = self.entry(results, "Attention")
        self.assertEqual(attention["score"], 2)  # 1 of 4 passed
        self.assertIn("crashed: SIGSEGV while running Attn.Boom", attention["output"])
        self.assertIn("crashed: exit code 0 while running Attn.Quits", attention["output"])
        self.assertIn("last output:", attention["output"])
        runs = self.logged()
        self.assertIn("tests --gtest_filter=Norm.*", runs)
        self.assertIn("tests --gtest_filter=Attn.*", runs)
        self.assertIn("tests --gtest_filter=Attn.Boom", runs)
        self.assertNotIn("tests --gtest_filter=Norm.A", runs, "groups that ran fine are not split")

    def test_timeout_fails_unfinished_tests(self):
        self.fake_tests({"Norm.A": "pass", "Attn.Loop": "hang", "Rope.A": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5},
                             {"name": "Attention", "filter": "Attn.*", "points": 5}], timeout_s=2)
        started = time.monotonic()
        code, results, _, _ = self.grade()
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(code, 0)
        self.assertEqual(results["score"], 0)
        for name in ("Norm", "Attention"):
            self.assertIn("timed out after 2 s while running Attn.Loop", self.entry(results, name)["output"])

    def test_reruns_after_a_crash_share_one_timeout(self):
        self.fake_tests({"Attn.Boom": "crash", "Attn.Loop": "hang", "Rope.A": "pass"})
        self.write_manifest([{"name": "Attention", "filter": "Attn.*", "points": 5},
                             {"name": "Rope", "filter": "Rope.*", "points": 5}], timeout_s=2)
        started = time.monotonic()
        _, results, _, _ = self.grade()
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("while running Attn.Loop", self.entry(results, "Attention")["output"])
        rope = self.entry(results, "Rope")
        self.assertEqual(rope["score"], 0)
        self.assertIn("crashed: SIGSEGV while running Attn.Boom", rope["output"])
        self.assertIn("were used up", rope["output"])

    def test_a_crash_then_a_hang_cost_their_own_tests_only(self):
        # A crash in the student's code, and a test that then hangs (as an engine
        # test does on a corrupted tree): the others are graded, the crash is named
        # by its signal, and the hang costs its test the short per-test limit.
        self.fake_tests({"Norm.A": "pass", "Attn.Boom": "crash", "Attn.Loop": "hang",
                         "Attn.Ok": "pass", "Rope.A": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5},
                             {"name": "Attention", "filter": "Attn.*", "points": 6},
                             {"name": "Rope", "filter": "Rope.*", "points": 5}], timeout_s=120)
        started = time.monotonic()
        _, results, _, stderr = self.grade("--test-timeout", "1")
        self.assertLess(time.monotonic() - started, 15, "one hang costs 1 s, not timeout_s")
        self.assertEqual(self.entry(results, "Norm")["score"], 5)
        self.assertEqual(self.entry(results, "Rope")["score"], 5)
        attention = self.entry(results, "Attention")
        self.assertEqual(attention["score"], 2)  # Attn.Ok, 1 of 3
        self.assertIn("crashed: SIGSEGV while running Attn.Boom", attention["output"])
        self.assertIn("timed out after 1 s while running Attn.Loop", attention["output"])
        self.assertIn("crashed (SIGSEGV in Attn.Boom)", stderr)
        self.assertEqual(self.logged().count("tests --gtest_filter=Attn.Loop"), 1,
                         "the hung test ran alone once, and was not run again")

    def test_a_hang_in_the_first_run_costs_only_that_test(self):
        self.fake_tests({"Norm.A": "pass", "Attn.Loop": "hang", "Attn.Ok": "pass", "Rope.A": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5},
                             {"name": "Attention", "filter": "Attn.*", "points": 4},
                             {"name": "Rope", "filter": "Rope.*", "points": 5}], timeout_s=120)
        manifest = json.loads(self.manifest.read_text())
        manifest["test_timeout_s"] = 1  # the manifest's limit, without --test-timeout
        self.manifest.write_text(json.dumps(manifest))
        started = time.monotonic()
        _, results, _, _ = self.grade()
        self.assertLess(time.monotonic() - started, 15)
        self.assertEqual((results["score"], results["max_score"]), (12, 14))
        self.assertIn("timed out after 1 s while running Attn.Loop: one test may run at most 1 s",
                      self.entry(results, "Attention")["output"])
        self.assertIn("tests --gtest_filter=Attn.*-Attn.Loop", self.logged(),
                      "the group's re-run leaves the hung test out")

    def test_missing_binary_is_a_compilation_failure(self):
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5},
                             {"name": "Rope", "filter": "Rope.*", "points": 7}])
        code, results, stdout, _ = self.grade()
        self.assertEqual(code, 0)
        self.assertEqual(len(results["tests"]), 1)
        compilation = results["tests"][0]
        self.assertEqual((compilation["name"], compilation["score"], compilation["max_score"]),
                         ("compilation", 0, 12))
        self.assertIn("test binary not found", compilation["output"])
        self.assertIn("lab 01: 0/12 points", stdout)

    def test_failed_build_is_one_compilation_entry(self):
        empty_build_dir = self.dir / "not-a-build"
        empty_build_dir.mkdir()
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}], throughput=THROUGHPUT)
        code, results, _, _ = self.grade("--build-dir", str(empty_build_dir), build=True)
        self.assertEqual(code, 0)
        self.assertEqual([t["name"] for t in results["tests"]], ["compilation"])
        self.assertEqual((results["score"], results["max_score"]), (0, 15))
        self.assertIn("build failed", results["tests"][0]["output"])


class TestBuildLogExcerpt(unittest.TestCase):
    """A failed build's entry shows the compiler's error, however long the commands are."""

    def test_the_error_survives_a_long_echoed_command(self):
        command = "/usr/bin/c++ " + "-I/some/include/path " * 100 + "-c student/scheduler.cpp"
        output = "\n".join(["[1/4] Building CXX object scheduler.cpp.o",
                            "FAILED: scheduler.cpp.o", command,
                            "scheduler.cpp:12:5: error: 'foo' was not declared in this scope",
                            "ninja: build stopped: subcommand failed."])
        excerpt = grading.build.build_log_excerpt(output)
        self.assertIn("error: 'foo' was not declared", excerpt)
        self.assertIn("(the compile command)", excerpt)
        self.assertNotIn("-I/some/include/path", excerpt)

    def test_a_long_log_keeps_its_end(self):
        output = "\n".join(f"note: line {i} " + "x" * 80 for i in range(200))
        output += "\nlast.cpp:1:1: error: the last error"
        excerpt = grading.build.build_log_excerpt(output)
        entry = grading.results.Entry("compilation", 0, 10, "build failed; last lines:\n" + excerpt)
        self.assertIn("error: the last error", entry.to_json()["output"])
        self.assertTrue(excerpt.startswith("... (earlier lines left out)"))


class TestThroughput(GraderTestCase):

    def setUp(self):
        super().setUp()
        self.fake_tests({"Norm.A": "pass"})

    def grade_speed(self, student_value, student_fails=False, repetitions=3):
        self.fake_cli("reference", value=100.0)
        self.fake_cli("student", value=student_value, fail=student_fails)
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}],
                            throughput=dict(THROUGHPUT, repetitions=repetitions))
        _, results, _, _ = self.grade()
        return self.entry(results, "Decode speed"), results

    def test_equal_speed_gets_full_points(self):
        speed, results = self.grade_speed(100.0)
        self.assertEqual((speed["score"], speed["status"]), (10, "passed"))
        self.assertEqual(results["leaderboard"],
                         [{"name": "Decode speed", "value": 1.0, "order": "desc"}])
        self.assertIn("student median 100", speed["output"])
        self.assertIn("reference median 100", speed["output"])

    def test_the_self_tests_check_reads_the_ratios_standard_error(self):
        # tests/tools/check_grade.py widens its band by the "+- E%" this prints.
        # It is the instructor's (the grader's self-tests): a student release has none.
        if not (Path(__file__).parent / "check_grade.py").is_file():
            self.skipTest("no tests/tools/check_grade.py: a student release")
        import check_grade
        speed, results = self.grade_speed(100.0)
        error = re.search(r"ratio 1.000 \+- ([0-9.]+)%", speed["output"]).group(1)
        self.assertEqual(check_grade.standard_errors(results), [float(error) / 100])

    def test_half_speed_gets_partial_points(self):
        speed, _ = self.grade_speed(50.0)
        expected = 10 * (0.5 - 0.1) / (0.8333 - 0.1)
        self.assertAlmostEqual(speed["score"], expected, places=2)
        self.assertEqual(speed["status"], "failed")
        self.assertIn("ratio 0.500", speed["output"])

    def test_very_slow_gets_nothing(self):
        speed, results = self.grade_speed(5.0)
        self.assertEqual(speed["score"], 0)
        self.assertEqual(results["leaderboard"][0]["value"], 0.05)

    def test_runs_alternate_student_first_then_reference_first(self):
        self.grade_speed(100.0, repetitions=5)
        bench_calls = [line for line in self.logged() if not line.startswith("tests")]
        self.assertEqual(bench_calls, ["student", "reference", "reference", "student"] * 2
                         + ["student", "reference"])

    def test_timed_runs_use_the_manifests_threads_whatever_the_environment(self):
        with mock.patch.dict(os.environ, {"OMP_NUM_THREADS": "7"}):
            self.grade_speed(100.0, repetitions=2)
        threads = Path(str(self.log) + ".env").read_text().split()
        self.assertEqual(threads, ["1"] * 8)

    def test_repetitions_flag_overrides_manifest(self):
        self.fake_cli("reference", value=100.0)
        self.fake_cli("student", value=100.0)
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}], throughput=THROUGHPUT)
        self.grade("--repetitions", "1")
        # Fewer repetitions than the manifest's 3, but any ratio needs two rounds
        # of each order (a spread to measure its noise from): four rounds.
        self.assertEqual([l for l in self.logged() if not l.startswith("tests")],
                         ["student", "reference", "reference", "student"] * 2)

    def test_failing_student_cli_gets_nothing(self):
        speed, results = self.grade_speed(100.0, student_fails=True)
        self.assertEqual((speed["score"], speed["status"]), (0, "failed"))
        self.assertIn("exit code 1", speed["output"])
        self.assertIn("not implemented: lab01: rmsnorm", speed["output"])
        self.assertEqual(results["leaderboard"], [])
        self.assertEqual([l for l in self.logged() if not l.startswith("tests")], ["student"],
                         "a student CLI that fails at once costs no reference run")

    def test_skip_throughput_leaves_the_speed_out(self):
        self.fake_cli("reference", value=100.0)
        self.fake_cli("student", value=100.0)
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}], throughput=THROUGHPUT)
        code, results, _, _ = self.grade("--skip-throughput")
        self.assertEqual(code, 0)
        self.assertEqual((results["score"], results["max_score"]), (5, 5))
        self.assertEqual([l for l in self.logged() if not l.startswith("tests")], [])


def run(value, other_cores=0.0, own_cores=1.0):
    return grading.timing.Run([value], 1.0, own_cores, other_cores)


class TestJudge(unittest.TestCase):
    """The estimator on chosen rounds: (student Run, reference Run) pairs; round i
    runs the student first when i is even."""

    SPEC = grading.manifest.Throughput("speed", 10, ["bench"], "m", repetitions=3)

    def test_an_order_effect_cancels(self):
        # The second run of a round is 10 % faster: student-first rounds read
        # 0.9, reference-first ones 1.1; the two medians' geometric mean is ~1.
        rounds = [(run(90), run(100)), (run(110), run(100)), (run(90), run(100)),
                  (run(110), run(100))]
        verdict = grading.timing.judge(rounds, self.SPEC, num_cpus=2)
        self.assertAlmostEqual(verdict.ratio, (0.9 * 1.1) ** 0.5)
        self.assertEqual(verdict.used, [0, 1, 2, 3])
        self.assertLessEqual(verdict.standard_error, grading.timing.RATIO_SE_TARGET)

    def test_rounds_other_programs_disturbed_are_not_used(self):
        # One thread on 2 CPUs: one core's worth of other work is harmless,
        # more than that (1.1 cores allowed) disturbs the run.
        rounds = [(run(100, 1.05), run(100, 1.0)), (run(40, 1.8), run(100, 0.0)),
                  (run(99), run(100)), (run(101), run(100)), (run(100), run(100)),
                  (run(100.5), run(100))]
        verdict = grading.timing.judge(rounds, self.SPEC, num_cpus=2)
        self.assertEqual(verdict.disturbed, [1])
        self.assertAlmostEqual(verdict.ratio, 1.0, places=2)

    def test_a_run_that_keeps_every_core_busy_allows_little_else(self):
        spec = grading.manifest.Throughput("speed", 10, ["bench"], "m", repetitions=2, threads=2)
        rounds = [(run(100, 0.3, 2.0), run(100, 0.0, 2.0)), (run(100), run(100)),
                  (run(100), run(100))]
        verdict = grading.timing.judge(rounds, spec, num_cpus=2)
        self.assertEqual(verdict.disturbed, [0])

    def test_too_few_undisturbed_rounds_is_busy(self):
        rounds = [(run(100, 1.9), run(100, 1.9))] * 12
        verdict = grading.timing.judge(rounds, self.SPEC, num_cpus=2)
        self.assertIsNone(verdict.ratio)
        self.assertTrue(verdict.busy)
        self.assertIn("0 of 12 rounds ran undisturbed", verdict.reason)

    def test_one_round_of_an_order_far_from_the_other_order_does_not_settle(self):
        # Student-first rounds agree at 1.0; the one reference-first round read
        # 0.74 (a disturbance the probe missed): the ratio, 0.86, must not stand.
        rounds = [(run(100), run(100)), (run(74), run(100)), (run(100.5), run(100))]
        verdict = grading.timing.judge(rounds, self.SPEC, num_cpus=2)
        self.assertFalse(verdict.settled())
        rounds.append((run(99.5), run(100)))  # a second reference-first round: medians again
        self.assertEqual(grading.timing.judge(rounds, self.SPEC, num_cpus=2).smallest_order, 2)

    def test_an_outlier_in_an_order_of_two_rounds_does_not_settle(self):
        # Lab 11's self-test once read these: student-first rounds at 0.99, the two
        # reference-first ones 1.093 and 1.467 (a run the probe saw as quiet). The
        # reference-first median is the two rounds' mean: the ratio, 1.121, must not stand.
        ratios = [0.996, 1.093, 0.989, 1.467, 0.992]
        rounds = [(run(100 * r), run(100)) for r in ratios]
        verdict = grading.timing.judge(rounds, self.SPEC, num_cpus=2)
        self.assertEqual(verdict.smallest_order, 2)
        self.assertFalse(verdict.settled())
        rounds += [(run(100), run(100)), (run(99.5), run(100))]
        self.assertLess(grading.timing.judge(rounds, self.SPEC, num_cpus=2).ratio, 1.05)

    def test_quiet_rounds_settle_at_two_of_each_order(self):
        values = iter([(run(100), run(100)), (run(101), run(100)), (run(99.5), run(100)),
                       (run(100.5), run(100))])
        rounds, verdict = grading.timing.measure_rounds(self.SPEC, lambda index: next(values))
        self.assertEqual(len(rounds), 4)
        self.assertTrue(verdict.settled())
        self.assertAlmostEqual(verdict.ratio, 1.0, places=2)

    def test_one_round_of_each_order_gives_no_ratio_however_well_they_agree(self):
        # Lab 7's self-test once stopped here: the reference against itself, two
        # rounds that agreed at 1.108 while its rounds vary by 8.5 %. One round of
        # an order has no spread around its own median, so nothing measured the
        # noise, and the noise floor called the ratio certain to 1 %.
        rounds = [(run(110.2), run(100)), (run(111.4), run(100))]
        spec = dataclasses.replace(self.SPEC, repetitions=2)
        verdict = grading.timing.judge(rounds, spec, num_cpus=2)
        self.assertIsNone(verdict.ratio)
        self.assertIn("2 of each order", verdict.reason)

    def test_few_rounds_widen_the_standard_error(self):
        # The same spread from 4 rounds and from 16: the 4-round error is larger
        # than the 1/sqrt(rounds) alone (Student's t for 2 degrees of freedom).
        few = [1.05, 0.95, 0.95, 1.05]
        many = few * 4
        judged = [grading.timing.judge([(run(100 * r), run(100)) for r in ratios], self.SPEC, num_cpus=2)
                  for ratios in (few, many)]
        self.assertGreater(judged[0].standard_error, 2 * judged[1].standard_error * 1.5)

    def test_lab7_like_noise_does_not_settle_in_six_rounds(self):
        # Rounds of Lab 7's reference against itself on 2 cores (8.5 % spread):
        # six of them are too few for a 2 % error, and more than the 3.5 % graded.
        lab7 = [1.061, 0.908, 1.046, 1.031, 0.968, 0.899]
        spec = dataclasses.replace(self.SPEC, repetitions=4, max_rounds=6)
        rounds, verdict = grading.timing.measure_rounds(
            spec, lambda index: (run(100 * lab7[index]), run(100)))
        self.assertEqual(len(rounds), 6)
        self.assertIsNone(verdict.ratio)
        self.assertTrue(verdict.busy)
        self.assertIn("disagree", verdict.reason)

    def test_noisy_rounds_get_more_rounds_then_a_ratio(self):
        noisy = [1.0, 1.08, 0.93, 1.05, 0.96, 1.02, 0.98, 1.01, 0.99, 1.0, 1.0, 1.0]
        rounds, verdict = grading.timing.measure_rounds(
            self.SPEC, lambda index: (run(100 * noisy[index]), run(100)))
        self.assertGreater(len(rounds), 3)
        self.assertAlmostEqual(verdict.ratio, 1.0, delta=0.03)

    def test_rounds_that_never_agree_are_busy(self):
        wild = [0.5, 1.6, 0.7, 1.4, 0.6, 1.5, 0.9, 1.2, 0.5, 1.7, 0.8, 1.3]
        rounds, verdict = grading.timing.measure_rounds(
            self.SPEC, lambda index: (run(100 * wild[index]), run(100)))
        self.assertEqual(len(rounds), 12)
        self.assertIsNone(verdict.ratio)
        self.assertTrue(verdict.busy)
        self.assertIn("disagree", verdict.reason)

    def test_a_busy_machine_gives_up_after_twice_the_repetitions(self):
        rounds, verdict = grading.timing.measure_rounds(self.SPEC,
                                               lambda index: (run(100, 1.9), run(100, 1.9)))
        self.assertEqual(len(rounds), 6, "most of 2 x 3 rounds disturbed: no more rounds")
        self.assertTrue(verdict.busy)

    def test_a_machine_busy_half_the_time_still_gets_its_rounds(self):
        # Two rounds of every four disturbed: not most of them, so rounds go on
        # (past the 3 repetitions, which alone are not enough) to a ratio.
        rounds, verdict = grading.timing.measure_rounds(
            self.SPEC, lambda index: (run(100, 1.9 if index % 4 >= 2 else 0.0), run(100)))
        self.assertGreater(len(rounds), 3)
        self.assertFalse(verdict.busy)
        self.assertAlmostEqual(verdict.ratio, 1.0, places=2)

    def test_a_looser_target_error_stops_sooner(self):
        # Rounds 2 % apart: a 2 % error is not reached in 4 rounds, 3.5 % is.
        spread = [1.0, 1.02, 0.98, 1.0] * 3
        strict = dataclasses.replace(self.SPEC, repetitions=4, max_rounds=12)
        loose = dataclasses.replace(strict, target_error=0.035)
        rounds_strict, _ = grading.timing.measure_rounds(
            strict, lambda index: (run(100 * spread[index]), run(100)))
        rounds_loose, verdict = grading.timing.measure_rounds(
            loose, lambda index: (run(100 * spread[index]), run(100)))
        self.assertEqual(len(rounds_loose), 4)
        self.assertLessEqual(verdict.standard_error, 0.035)
        self.assertGreater(len(rounds_strict), 4)

    def test_max_rounds_bounds_a_noisy_measurement_but_not_below_the_repetitions(self):
        noisy = [1.0, 1.08, 0.93, 1.05, 0.96, 1.02, 0.98, 1.01, 0.99, 1.0, 1.0, 1.0]
        spec = dataclasses.replace(self.SPEC, max_rounds=4)
        rounds, _ = grading.timing.measure_rounds(spec, lambda index: (run(100 * noisy[index]), run(100)))
        self.assertLessEqual(len(rounds), 4)
        self.assertEqual(dataclasses.replace(self.SPEC, max_rounds=1).round_limit(), 4,
                         "never below two rounds of each order")
        self.assertEqual(dataclasses.replace(self.SPEC, repetitions=5, max_rounds=1)
                         .round_limit(), 5)


class TestBusyMachine(GraderTestCase):
    """A machine too busy to time: the speed is not graded, never graded wrong."""

    def grade_busy(self, *flags, outcome="pass"):
        self.fake_tests({"Norm.A": outcome})
        self.fake_cli("reference", value=100.0)
        self.fake_cli("student", value=100.0)
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}], throughput=THROUGHPUT)
        busy = grading.timing.Run([100.0], 1.0, 1.0, 1.95)
        with mock.patch.object(grading.timing, "timed_run", return_value=busy):
            return self.grade(*flags)

    def test_the_speed_scores_zero_of_zero_and_says_why(self):
        code, results, stdout, _ = self.grade_busy()
        self.assertEqual(code, 0)
        speed = self.entry(results, "Decode speed")
        self.assertEqual((speed["score"], speed["max_score"]), (0, 0))
        self.assertTrue(speed["output"].startswith("not graded: machine busy"))
        self.assertIn("1.95", speed["output"])
        self.assertIn("make grade LAB=1", speed["output"])
        self.assertEqual(results["leaderboard"], [])
        self.assertEqual((results["score"], results["max_score"]), (5, 5))
        self.assertIn("speed not graded: machine busy", stdout)

    def test_skip_if_busy_exits_77_when_the_rest_passed(self):
        code, _, _, _ = self.grade_busy("--min-score", "100", "--skip-if-busy")
        self.assertEqual(code, 77)

    def test_skip_if_busy_still_fails_failing_tests(self):
        code, _, _, _ = self.grade_busy("--min-score", "100", "--skip-if-busy", outcome="fail")
        self.assertEqual(code, 1)


class TestThroughputCurve(unittest.TestCase):

    def test_curve(self):
        spec = grading.manifest.Throughput("speed", 10, ["bench"], "m", full_ratio=0.8, zero_ratio=0.2)
        self.assertEqual(grading.timing.throughput_points(1.5, spec), 10)
        self.assertEqual(grading.timing.throughput_points(0.8, spec), 10)
        self.assertAlmostEqual(grading.timing.throughput_points(0.5, spec), 5)
        self.assertEqual(grading.timing.throughput_points(0.2, spec), 0)
        self.assertEqual(grading.timing.throughput_points(0.0, spec), 0)


# A throughput program look-alike (Lab 8's tools/labkit/gemv_speed.cpp): times both kernels itself.
FAKE_PROGRAM = r'''#!{python}
import json, sys

with open({log!r}, "a") as log:
    log.write("program " + " ".join(sys.argv[1:]) + "\n")
if {fail!r}:
    print("gemv_speed: not implemented: lab01: step4", file=sys.stderr)
    sys.exit(1)
print(json.dumps({{"mine_gb_per_s": {mine!r}, "theirs_gb_per_s": 10.0}}))
'''

PROGRAM_THROUGHPUT = {"name": "Kernel speed", "points": 10, "program": "tools/fake.cpp",
                      "args": ["--trials", "3"], "metric": "mine_gb_per_s",
                      "reference_metric": "theirs_gb_per_s", "repetitions": 2,
                      "full_ratio": 0.8, "zero_ratio": 0.1}


class TestThroughputProgram(GraderTestCase):

    def grade_program(self, mine, fail=False):
        self.fake_tests({"Norm.A": "pass"})
        program = self.make_script(self.dir / "lab01_throughput", FAKE_PROGRAM.format(
            python=sys.executable, log=str(self.log), mine=mine, fail=fail))
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}],
                            throughput=PROGRAM_THROUGHPUT)
        _, results, _, _ = self.grade("--student-program", str(program))
        return self.entry(results, "Kernel speed"), results

    def test_ratio_of_the_two_metrics_of_one_program(self):
        speed, results = self.grade_program(4.5)
        self.assertAlmostEqual(speed["score"], 10 * (0.45 - 0.1) / (0.8 - 0.1), places=2)
        self.assertEqual(results["leaderboard"][0]["value"], 0.45)
        self.assertIn("timed in the same runs", speed["output"])
        calls = [line for line in self.logged() if not line.startswith("tests")]
        self.assertEqual(calls, ["program --trials 3"] * 4, "the CLIs are not run")

    def test_failing_program_gets_nothing(self):
        speed, results = self.grade_program(10.0, fail=True)
        self.assertEqual((speed["score"], results["leaderboard"]), (0, []))
        self.assertIn("not implemented: lab01: step4", speed["output"])

    def test_program_needs_a_reference_metric(self):
        bad = {k: v for k, v in PROGRAM_THROUGHPUT.items() if k != "reference_metric"}
        with self.assertRaises(grading.manifest.ManifestError):
            grading.manifest.parse_manifest({"lab": 1, "name": "fake", "throughput": bad,
                                  "groups": [{"name": "N", "filter": "N.*", "points": 1}]}, 1, self.dir)


class TestResultsFile(GraderTestCase):

    def test_schema(self):
        self.fake_tests({"Norm.A": "pass", "Norm.B": "fail"})
        self.fake_cli("reference", value=10.0)
        self.fake_cli("student", value=9.0)
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}],
                            throughput=dict(THROUGHPUT, repetitions=1))
        _, results, stdout, _ = self.grade()
        self.assertEqual(set(results), {"score", "max_score", "output", "tests", "leaderboard",
                                        "execution_time"})
        for test in results["tests"]:
            self.assertEqual(set(test), {"name", "score", "max_score", "status", "output", "visibility"})
            self.assertIn(test["status"], ("passed", "failed"))
            self.assertEqual(test["visibility"], "visible")
        self.assertEqual((results["score"], results["max_score"]), (12.5, 15))
        self.assertIsInstance(results["execution_time"], int)
        # The top-level output is the scorecard's last line.
        self.assertEqual(results["output"], stdout.splitlines()[-1])
        self.assertEqual(results["output"], "lab 01: 12.5/15 points")

    def test_a_hidden_group_is_graded_with_gradescopes_visibility(self):
        self.fake_tests({"Norm.A": "pass", "HiddenNorm.A": "fail", "Late.A": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5},
                             {"name": "Hidden", "filter": "HiddenNorm.*", "points": 3,
                              "visibility": "hidden"},
                             {"name": "Late", "filter": "Late.*", "points": 2,
                              "visibility": "after_due_date"}])
        code, results, _, _ = self.grade()
        self.assertEqual(code, 0)
        self.assertEqual([(t["name"], t["visibility"], t["score"]) for t in results["tests"]],
                         [("Norm", "visible", 5), ("Hidden", "hidden", 0),
                          ("Late", "after_due_date", 2)])

    def test_an_unknown_visibility_is_refused(self):
        self.fake_tests({"Norm.A": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5,
                              "visibility": "secret"}])
        code, results, _, stderr = self.grade()
        self.assertEqual(code, 2)
        self.assertIn("groups[0].visibility must be one of visible, hidden", stderr)

    def test_a_release_manifest_names_the_hidden_points_it_left_out(self):
        self.fake_tests({"Norm.A": "pass"})
        manifest = {"lab": 1, "name": "fake", "hidden_points": 10,
                    "groups": [{"name": "Norm", "filter": "Norm.*", "points": 90}]}
        self.manifest.write_text(json.dumps(manifest))
        _, results, stdout, _ = self.grade()
        self.assertEqual(results["max_score"], 90)
        self.assertEqual(stdout.splitlines()[-1], "lab 01: 90/90 points; the course's autograder "
                                                  "also runs hidden tests worth 10 points")

    def test_written_when_the_grader_breaks(self):
        self.fake_tests({"Norm.A": "pass"})
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 5}])
        original = grading.cli.grade_tests  # the stage as the command calls it

        def broken(*_):
            raise RuntimeError("grader bug")
        grading.cli.grade_tests = broken
        try:
            code, results, _, stderr = self.grade()
        finally:
            grading.cli.grade_tests = original
        self.assertEqual(code, 2)
        self.assertEqual([t["name"] for t in results["tests"]], ["grader error"])
        self.assertEqual((results["score"], results["max_score"]), (0, 5))
        self.assertIn("RuntimeError: grader bug", results["tests"][0]["output"])
        self.assertIn("grader bug", stderr)

    def test_malformed_manifest_fails_in_one_line(self):
        self.manifest.write_text(json.dumps({"lab": 1, "name": "fake",
                                             "groups": [{"name": "Norm", "filter": "Norm.*", "points": "ten"}]}))
        code, results, _, stderr = self.grade()
        self.assertEqual(code, 2)
        self.assertEqual(results["tests"][0]["status"], "failed")
        errors = [line for line in stderr.splitlines() if "error" in line]
        self.assertEqual(len(errors), 1)
        self.assertIn("groups[0].points must be a number >= 0", errors[0])

    def test_manifest_validation(self):
        good = {"lab": 1, "name": "fake", "groups": [{"name": "Norm", "filter": "Norm.*", "points": 5}]}
        bad = {"wrong lab": dict(good, lab=2),
               "no groups": dict(good, groups=[]),
               "group not an object": dict(good, groups=["Norm.*"]),
               "missing filter": dict(good, groups=[{"name": "Norm", "points": 5}]),
               "typo in a key": dict(good, groups=[{"name": "Norm", "filter": "N.*", "point": 5}]),
               "duplicate names": dict(good, groups=good["groups"] * 2),
               "bad timeout": dict(good, timeout_s=0),
               "bad test timeout": dict(good, test_timeout_s=-1),
               "not_graded without a reason": dict(good, not_graded=[{"filter": "X.*", "why": ""}]),
               "bad args": dict(good, throughput=dict(THROUGHPUT, args="bench")),
               "ratios reversed": dict(good, throughput=dict(THROUGHPUT, zero_ratio=0.9, full_ratio=0.5)),
               "zero repetitions": dict(good, throughput=dict(THROUGHPUT, repetitions=0))}
        parse_manifest = grading.manifest.parse_manifest
        self.assertEqual(parse_manifest(good, 1, self.dir).max_score, 5)
        self.assertEqual(parse_manifest(dict(good, throughput=THROUGHPUT), 1, self.dir).max_score, 15)
        for why, manifest in bad.items():
            with self.subTest(why):
                with self.assertRaises(grading.manifest.ManifestError) as caught:
                    grading.manifest.parse_manifest(manifest, 1, self.dir)
                self.assertNotIn("\n", str(caught.exception))


class TestExitCodes(GraderTestCase):
    """--min-score / --max-score, through the real command line."""

    def run_grader(self, *flags):
        command = [sys.executable, str(GRADE_PY), "--lab", "1", "--no-build",
                   "--manifest", str(self.manifest), "--out", str(self.out),
                   "--student-tests", str(self.tests_binary), *flags]
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)

    def test_thresholds(self):
        self.fake_tests({"Norm.A": "pass", "Norm.B": "fail"})  # 50 %
        self.write_manifest([{"name": "Norm", "filter": "Norm.*", "points": 4}])
        for flags, expected in ((["--min-score", "40"], 0), (["--min-score", "60"], 1),
                                (["--max-score", "60"], 0), (["--max-score", "40"], 1), ([], 0)):
            with self.subTest(flags=flags):
                self.out.unlink(missing_ok=True)
                result = self.run_grader(*flags)
                self.assertEqual(result.returncode, expected, result.stderr)
                self.assertTrue(self.out.exists())
                self.assertEqual(result.stdout.splitlines()[-1], "lab 01: 2/4 points")


class TestGpuTrack(GraderTestCase):
    """--track cuda: no score where the track cannot run, and an unwritten kernel's line."""

    GROUPS = [{"name": "Norm", "filter": "Norm.*", "points": 6},
              {"name": "Softmax", "filter": "Softmax.*", "points": 4}]

    def grade_cuda(self, *extra):
        return self.grade("--track", "cuda", *extra)

    def test_every_test_skipped_is_not_graded_and_exits_77(self):
        self.fake_tests({"Norm.A": "skip", "Softmax.B": "skip", "Other.C": "pass"})
        self.write_manifest(self.GROUPS, track="cuda")
        code, results, stdout, _ = self.grade_cuda("--min-score", "100")
        self.assertEqual(code, grading.cli.NOT_GRADED_EXIT)
        self.assertEqual((results["score"], results["max_score"]), (0, 0))
        self.assertEqual([t["name"] for t in results["tests"]], ["not graded"])
        self.assertIn("no usable GPU: fake driver is missing", results["tests"][0]["output"])
        self.assertEqual(stdout.splitlines()[-1],
                         "lab 01 cuda track: not graded: every test was skipped: "
                         "no usable GPU: fake driver is missing")

    def test_some_tests_run_is_graded(self):
        self.fake_tests({"Norm.A": "pass", "Softmax.B": "skip"})
        self.write_manifest(self.GROUPS, track="cuda")
        code, results, stdout, _ = self.grade_cuda()
        self.assertEqual(code, 0)
        self.assertEqual((results["score"], results["max_score"]), (6, 10))
        self.assertIn("lab 01 cuda track: 6/10 points", stdout.splitlines()[-1])

    def test_the_cpu_track_still_scores_skipped_tests_zero(self):
        self.fake_tests({"Norm.A": "skip", "Softmax.B": "skip"})
        self.write_manifest(self.GROUPS)
        code, results, _, _ = self.grade()
        self.assertEqual((code, results["score"], results["max_score"]), (0, 0, 10))

    def test_an_unwritten_kernels_line_is_in_its_failure(self):
        self.fake_tests({"Norm.A": "unwritten", "Softmax.B": "pass"})
        self.write_manifest(self.GROUPS, track="cuda")
        _, results, _, _ = self.grade_cuda()
        output = self.entry(results, "Norm")["output"]
        self.assertIn("not implemented: lab01: fake_kernel (this kernel writes nothing)", output)
        self.assertIn("gpu nan", output)

    def test_a_manifest_of_the_other_track_is_an_error(self):
        self.fake_tests({"Norm.A": "pass"})
        self.write_manifest(self.GROUPS)  # no "track": a CPU manifest
        code, results, _, _ = self.grade_cuda()
        self.assertEqual(code, 2)
        self.assertIn("--track is cuda", results["tests"][0]["output"])

    def test_a_build_without_cuda_is_not_graded(self):
        self.write_manifest(self.GROUPS, track="cuda")
        for cache, reason in (("SERVELAB_CUDA:BOOL=OFF\n", "SERVELAB_CUDA=OFF"),
                              ("SERVELAB_CUDA:BOOL=ON\nCMAKE_CUDA_COMPILER:FILEPATH="
                               "CMAKE_CUDA_COMPILER-NOTFOUND\n", "nvcc was not found")):
            with self.subTest(reason):
                build = self.dir / "build"
                build.mkdir(exist_ok=True)
                (build / "CMakeCache.txt").write_text("# cache\n" + cache)
                stdout = io.StringIO()
                with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
                    code = grade.main(["--lab", "1", "--track", "cuda", "--manifest", str(self.manifest),
                                       "--out", str(self.out), "--build-dir", str(build)])
                self.assertEqual(code, grading.cli.NOT_GRADED_EXIT)
                self.assertIn(reason, stdout.getvalue().splitlines()[-1])
                self.assertEqual(json.loads(self.out.read_text())["max_score"], 0)



class TestCommandLine(unittest.TestCase):
    def test_help_prints_every_option(self):
        # argparse formats help with %: a literal % in a help string once made
        # `grade.py --help` crash with a traceback instead of printing.
        done = subprocess.run([sys.executable, str(GRADE_PY), "--help"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr[-500:])
        for option in ("--lab", "--target-error", "--test-timeout", "--skip-if-busy"):
            self.assertIn(option, done.stdout)


if __name__ == "__main__":
    unittest.main()
