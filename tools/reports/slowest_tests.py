#!/usr/bin/env python3
"""slowest_tests.py — the slowest tests of a ctest run, from its JUnit report.

Part of the test harness: `make test` prints this table after ctest, so that
a test that grows slow is seen at once (the suite must stay under 15 minutes
on a 2-core machine; docs/labs.md).

  slowest_tests.py REPORT.xml [--count 10]

Standard library only. A missing or unreadable report prints one line and
exits 0: the table is information, never the reason a run fails.
"""
import argparse
import sys
import xml.etree.ElementTree as ElementTree


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        root = ElementTree.parse(args.report).getroot()
    except (OSError, ElementTree.ParseError) as error:
        print(f"slowest_tests: no timings ({args.report}: {error})")
        return 0
    cases = []
    for case in root.iter("testcase"):
        try:
            seconds = float(case.get("time", "0"))
        except ValueError:
            continue
        status = case.get("status", "")
        if case.find("skipped") is not None:
            status = "skipped"
        elif case.find("failure") is not None:
            status = "failed"
        cases.append((seconds, case.get("name", "?"), status))
    cases.sort(reverse=True)
    total = sum(seconds for seconds, _, _ in cases)
    print(f"The {min(args.count, len(cases))} slowest of {len(cases)} tests "
          f"({total:.0f} s of test time in all):")
    for seconds, name, status in cases[:args.count]:
        note = f"  ({status})" if status in ("skipped", "failed") else ""
        print(f"  {seconds:8.1f} s  {name}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
