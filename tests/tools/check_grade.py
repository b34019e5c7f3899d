#!/usr/bin/env python3
"""check_grade.py — checks on results.json files the grader self-tests wrote.

  check_grade.py REFERENCE.json --ratio-between LO HI [--skeleton SKELETON.json]

- the reference graded against itself: its throughput ratio (leaderboard)
  lies in [LO, HI] — timing noise on one machine, in one run, stays small.
  When the grader could not time it (its entry says "not graded: machine
  busy"), this exits 77, which ctest reports as SKIPPED;
- the untouched skeleton: every failed test group says "not implemented"
  (no crash, no timeout) and its score is 0.
Exits 1 with one line per problem, 77 when the reference's speed was not graded.
"""
import argparse
import json
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("--ratio-between", nargs=2, type=float, required=True)
    parser.add_argument("--skeleton")
    args = parser.parse_args()
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

    reference = json.load(open(args.reference))
    ratios = [entry["value"] for entry in reference.get("leaderboard", [])]
    low, high = args.ratio_between
    busy = [test for test in reference.get("tests", [])
            if test.get("output", "").startswith("not graded: machine busy")]
    if busy and not ratios:
        print(busy[0]["output"].splitlines()[0])
        if not problems:
            print("SKIPPED: the reference's speed could not be timed on this busy machine")
            return 77
    if not ratios:
        problems.append(f"{args.reference}: no throughput ratio in the leaderboard")
    for ratio in ratios:
        status = "ok" if low <= ratio <= high else "OUT OF RANGE"
        print(f"reference vs reference throughput ratio {ratio:.3f} (want {low}-{high}): {status}")
        if status != "ok":
            problems.append(f"reference-vs-reference ratio {ratio:.3f} outside [{low}, {high}]")

    for problem in problems:
        print(f"FAIL: {problem}")
    print("PASSED" if not problems else f"FAILED: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
