"""process.py — running a program under a limit, and saying how it ended.

Part of the autograder (tools/labkit/grade.py; docs/labs.md). Every program the
grader starts (cmake, the lab's test binary, the CLIs it times) runs from the
repository root in a process group of its own, so a timeout kills its children
too. A GoogleTest run is watched test by test: one test past its own limit is
stopped as hung. describe_exit and describe_failed_run turn an exit status into
words a student can act on (SIGSEGV, an abort, an early exit).
"""
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from . import REPO_ROOT
from .results import number, tail


LAST_OUTPUT_LINES = 15       # program lines shown when a run crashes


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
