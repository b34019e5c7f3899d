"""results.py — the scorecard: one Entry per graded item, results.json and the printed table.

Part of the autograder (tools/labkit/grade.py; docs/labs.md). results.json
follows Gradescope's schema (score, max_score, output, tests, leaderboard,
execution_time); each entry's output is cut to OUTPUT_LIMIT characters.
"""
import json
from dataclasses import dataclass
from pathlib import Path


OUTPUT_LIMIT = 2000          # characters of output kept per results.json entry


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
