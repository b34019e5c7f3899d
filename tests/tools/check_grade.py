#!/usr/bin/env python3
"""check_grade.py — checks on results.json files the grader self-tests wrote.

  check_grade.py REFERENCE.json --ratio-between LO HI
  check_grade.py --skeleton SKELETON.json

- (REFERENCE.json, make test-all) the reference graded against itself:
  its throughput ratio (leaderboard) lies in [LO, HI], or at least within
  4.5 of the grader's own standard errors of 1 (the "ratio R +- E%" line of
  its entry): the grader may report an uncertain ratio, never a biased one
  or a false certainty. When the grader could not time it (its entry says
  "not graded: machine busy"), this exits 77, which ctest reports as
  SKIPPED;
- (--skeleton, make test) the untouched skeleton: every failed test group
  says "not implemented" (no crash, no timeout) and its score is 0.
Exits 1 with one line per problem, 77 when the reference's speed was not graded.
"""
import argparse
import json
import math
import re
import sys


ERRORS_ALLOWED = 4.5  # standard errors a ratio may stray from 1 beyond [LO, HI]


def standard_errors(results):
    """The standard error (of log ratio, 0.02 = 2 %) of each graded speed entry."""
    errors = []
    for test in results.get("tests", []):
        match = re.search(r"^ratio [0-9.]+ \+- ([0-9.]+)%", test.get("output", ""), re.MULTILINE)
        if match:
            errors.append(float(match.group(1)) / 100)
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", nargs="?")
    parser.add_argument("--ratio-between", nargs=2, type=float)
    parser.add_argument("--skeleton")
    args = parser.parse_args()
    if (args.reference is None) != (args.ratio_between is None):
        parser.error("REFERENCE.json and --ratio-between go together")
    if args.reference is None and args.skeleton is None:
        parser.error("nothing to check: give REFERENCE.json or --skeleton")
    problems = []

    if args.skeleton:
        skeleton = json.load(open(args.skeleton))
        if skeleton.get("score", 1) != 0:
            problems.append(f"skeleton scored {skeleton.get('score')}, expected 0")
        for test in skeleton.get("tests", []):
            output = test.get("output", "").lower()
            if test.get("status") == "failed" and "throughput" not in test.get("name", "").lower():
                if "not implemented" not in output:
                    problems.append(f"skeleton test '{test['name']}' failed without a "
                                    f"'not implemented' message: {output[:200]!r}")
                if "crashed" in output or "timed out" in output:
                    problems.append(f"skeleton test '{test['name']}' crashed or hung")
        print(f"skeleton: score {skeleton.get('score')}, {len(skeleton.get('tests', []))} entries")

    if args.reference is not None:
        result = check_reference_ratio(args.reference, args.ratio_between, problems)
        if result is not None and not problems:
            return result

    for problem in problems:
        print(f"FAIL: {problem}")
    print("PASSED" if not problems else f"FAILED: {len(problems)} problem(s)")
    return 1 if problems else 0


def check_reference_ratio(path, ratio_between, problems):
    """Appends to `problems`; returns 77 when the grader could not time the speed."""
    reference = json.load(open(path))
    ratios = [entry["value"] for entry in reference.get("leaderboard", [])]
    low, high = ratio_between
    busy = [test for test in reference.get("tests", [])
            if test.get("output", "").startswith("not graded: machine busy")]
    if busy and not ratios:
        print(busy[0]["output"].splitlines()[0])
        print("SKIPPED: the reference's speed could not be timed on this busy machine")
        return 77
    if not ratios:
        problems.append(f"{path}: no throughput ratio in the leaderboard")
    errors = standard_errors(reference)
    if ratios and len(errors) != len(ratios):
        problems.append(f"{path}: {len(ratios)} ratios but {len(errors)} "
                        f"'ratio R +- E%' lines in the entries")
    for ratio, error in zip(ratios, errors):
        # The band the grader's uncertainty allows around 1, never narrower than [LO, HI].
        low_ok = min(low, math.exp(-ERRORS_ALLOWED * error))
        high_ok = max(high, math.exp(ERRORS_ALLOWED * error))
        status = "ok" if low_ok <= ratio <= high_ok else "OUT OF RANGE"
        print(f"reference vs reference throughput ratio {ratio:.3f} +- {error:.1%} "
              f"(want {low_ok:.3f}-{high_ok:.3f}): {status}")
        if status != "ok":
            problems.append(f"reference-vs-reference ratio {ratio:.3f} +- {error:.1%} outside "
                            f"[{low_ok:.3f}, {high_ok:.3f}]: the grader is biased or its "
                            f"standard error is too small")
    return None


if __name__ == "__main__":
    sys.exit(main())
