#!/usr/bin/env python3
"""grade_planted_bug.py — one planted bug, graded: its group must catch it, by name.

Part of the lab framework (tests/labs/README.md). Grades the test binary built
with one planted bug (labNN_bug_<name>_tests, labs/labs.cmake) on the one
manifest group the bug's patch names (tools/labkit/grade.py --group), and checks:

  - that group scores below full marks: the tests catch the bug;
  - its failure output contains the patch's `Expect:` text (any case): the
    message names the mistake in the student's terms.

Prints one line for tests/labs/README.md's table: the bug, the group's score
and the first failure line that holds the expected text. Exits 1 when a
check fails, 2 when the bug or its binary cannot be found.

  grade_planted_bug.py --lab 5 --bug preempt_keeps_blocks \
      --student-tests build/release/lab05_bug_preempt_keeps_blocks_tests [--out X.json]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(REPO_ROOT / "tools" / "labkit"))
import planted_bugs  # noqa: E402


# GoogleTest echoes the source of a failed assertion on these lines; text there
# is the test's code, not a message the test produced.
SOURCE_ECHO = ("Value of:", "Expected:", "Expected equality of these values:", "Which is:")


def message_line(output, expect):
    """The first line of `output` that contains `expect` (any case) and is not an
    echo of the assertion's source, or ''."""
    for line in output.splitlines():
        line = line.strip()
        if line.startswith(SOURCE_ECHO):
            continue
        if expect.lower() in line.lower():
            if line.startswith("Actual: false (") and line.endswith(")"):
                line = line[len("Actual: false ("):-1]  # EXPECT_TRUE's wrapping
            return line
    return ""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=int, required=True)
    parser.add_argument("--bug", required=True, help="the patch's name: tests/labs/labNN/<bug>.patch")
    parser.add_argument("--student-tests", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args(argv)

    try:
        bugs = {bug.name: bug for bug in planted_bugs.load_bugs(args.lab)}
    except planted_bugs.PatchError as error:
        print(f"grade_planted_bug: {error}", file=sys.stderr)
        return 2
    bug = bugs.get(args.bug)
    if bug is None:
        print(f"grade_planted_bug: lab {args.lab:02d} has no planted bug {args.bug!r} "
              f"(known: {', '.join(sorted(bugs)) or 'none'})", file=sys.stderr)
        return 2
    if not args.student_tests.is_file():
        print(f"grade_planted_bug: no test binary {args.student_tests}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="planted-bug-") as scratch:
        out = args.out or pathlib.Path(scratch) / "results.json"
        command = [sys.executable, str(REPO_ROOT / "tools" / "labkit" / "grade.py"), "--lab", str(args.lab),
                   "--no-build", "--student-tests", str(args.student_tests),
                   "--track", bug.track, "--group", bug.group, "--out", str(out)]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode == 77:  # a cuda-track bug where no GPU can run it
            print(run.stdout.strip().splitlines()[-1] if run.stdout.strip() else "skipped")
            return 77
        if run.returncode not in (0, 1):
            print(run.stdout + run.stderr, file=sys.stderr)
            print(f"grade_planted_bug: grade.py failed (exit {run.returncode})", file=sys.stderr)
            return 2
        results = json.loads(out.read_text(encoding="utf-8"))

    entry = next((test for test in results["tests"] if test["name"] == bug.group), None)
    problems = []
    if entry is None:
        problems.append(f"the grade has no entry for the group {bug.group!r}")
        score, line = "?", ""
    else:
        score = f"{entry['score']:g}/{entry['max_score']:g}"
        if entry["score"] >= entry["max_score"]:
            problems.append(f"the group {bug.group!r} gave full marks ({score}) to code with "
                            f"this bug: {bug.description}")
        line = message_line(entry["output"], bug.expect)
        if not line and entry["score"] < entry["max_score"]:
            problems.append(f"the group's failure output does not say {bug.expect!r}; it says:\n"
                            f"{entry['output'][:1500]}")
    print(f"{bug.tag} {bug.name} ({bug.function}): group '{bug.group}' scored {score}; "
          f"message: {line or '(none)'}")
    for problem in problems:
        print(f"FAIL: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
