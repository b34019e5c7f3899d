"""grading — the servelab autograder, one module per stage; tools/labkit/grade.py runs it.

Part of the lab framework (docs/labs.md, "Grading"). grade.py's docstring says
what a grade is; the modules, in the order a grade uses them:

  manifest.py  what to grade: labs/labNN_<name>/manifest.json read and checked
               (Lab, Group, Throughput; ManifestError for a bad one)
  build.py     stage 1: `cmake --build` of the lab's targets; a failed build's entry
  process.py   running a program with limits: timeouts, hung tests, how a run ended
  gtest.py     stage 2: one GoogleTest run scored by group; reruns after a crash
  timing.py    stage 3: the speed ratio, student against reference, on a busy machine
  results.py   stage 4: scorecard entries and results.json (Gradescope's schema)
  cli.py       the command line: arguments, the stages in order, the exit status

This file holds the little every stage shares: where the repository is, the
NotGraded exception and the check of a JSON number.
"""
import math
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


class NotGraded(Exception):
    """The track cannot run on this machine or build; the message says why."""


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
