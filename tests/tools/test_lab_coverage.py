#!/usr/bin/env python3
"""test_lab_coverage.py — every test a lab builds is graded, or says why it is not.

Part of the lab framework (all labs). A lab's test binary is built from its
manifest's "test_sources"; the grader scores only the tests some group's
filter matches. A test outside every group still runs and can still fail red
in front of the student — for points that do not exist (Lab 11's three
LongestPrefixMatch tests did). So for every manifest (manifest.json and
manifest_cuda.json) of every lab, each TEST / TEST_F in its test sources must
be matched by a group's filter, or by a "not_graded" entry of the manifest:

    "not_graded": [{"filter": "KvCacheBytes.*", "why": "the reference's sizing ..."}]

which is for tests that do not run the student's code (they pass on the
untouched skeleton, so as a group they would give points for nothing, and
the skeleton must score 0). Each entry needs a reason, must match some test,
and must not match a graded one.

Reads the sources, so it needs no build (the test names are read with a
regular expression; a parameterized TEST_P in a lab's sources is refused,
since its full names exist only in the binary). Standard library only.
Run: python3 tests/tools/test_lab_coverage.py
"""
import json
import re
import sys
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, str(REPO_ROOT / "tools"))
from grade import matches_filter  # noqa: E402  (the grader's own filter matching)

TEST_MACRO = re.compile(r"^\s*TEST(?:_F)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.MULTILINE)
PARAMETERIZED = re.compile(r"^\s*(?:TEST_P|TYPED_TEST|TYPED_TEST_P)\(", re.MULTILINE)


def manifests():
    return sorted(REPO_ROOT.glob("labs/lab[0-9][0-9]_*/manifest*.json"))


def test_names(manifest, data):
    """'Suite.Test' of every test in the manifest's test sources; AssertionError when unreadable."""
    names = []
    for source in data.get("test_sources", []):
        text = (REPO_ROOT / source).read_text(encoding="utf-8")
        if PARAMETERIZED.search(text):
            raise AssertionError(f"{manifest}: {source} has a parameterized test, whose names "
                                 f"this check cannot read from the source; extend it")
        names += [f"{suite}.{test}" for suite, test in TEST_MACRO.findall(text)]
    return names


def coverage_problems(manifest, data):
    """One line per problem: an ungraded test without a reason, a bad not_graded entry."""
    where = manifest.relative_to(REPO_ROOT)
    names = test_names(where, data)
    groups = [group["filter"] for group in data["groups"]]
    exempt = data.get("not_graded", [])
    problems = []
    for entry in exempt:
        covers = [name for name in names if matches_filter(name, entry.get("filter", ""))]
        if not str(entry.get("why", "")).strip():
            problems.append(f"{where}: not_graded {entry.get('filter')!r} gives no 'why'")
        if not covers:
            problems.append(f"{where}: not_graded {entry.get('filter')!r} matches no test")
        graded = [name for name in covers if any(matches_filter(name, f) for f in groups)]
        if graded:
            problems.append(f"{where}: not_graded {entry.get('filter')!r} matches graded "
                            f"test(s) {', '.join(graded)}")
    for name in names:
        if any(matches_filter(name, f) for f in groups):
            continue
        if any(matches_filter(name, entry.get("filter", "")) for entry in exempt):
            continue
        problems.append(f"{where}: {name} is built but in no group: add it to the group whose "
                        f"rule it checks, or, if it does not run the student's code, to "
                        f"\"not_graded\" with the reason")
    return problems


class EveryBuiltTestIsGraded(unittest.TestCase):

    def test_every_lab(self):
        found = manifests()
        self.assertGreaterEqual(len(found), 11, "every lab has a manifest")
        problems = []
        for manifest in found:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            self.assertTrue(data.get("test_sources"), f"{manifest}: no test_sources")
            problems += coverage_problems(manifest, data)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


class TheCheckCatches(unittest.TestCase):
    """The check itself, on a made-up manifest: it must be able to fail."""

    def setUp(self):
        self.manifest = REPO_ROOT / "labs" / "lab11_radix_attention" / "manifest.json"
        self.data = json.loads(self.manifest.read_text(encoding="utf-8"))

    def test_a_test_outside_every_group(self):
        self.data["groups"] = [g for g in self.data["groups"]
                               if not g["filter"].startswith("LongestPrefixMatch")]
        problems = coverage_problems(self.manifest, self.data)
        self.assertTrue(any("LongestPrefixMatch.AmongEqualMatchesTheQueueOrderDecides is built "
                            "but in no group" in p for p in problems), problems)

    def test_an_exemption_without_a_reason_or_over_a_graded_test(self):
        self.data["not_graded"] = [{"filter": "RadixCache.*", "why": ""},
                                   {"filter": "Nothing.*", "why": "made up"}]
        problems = "\n".join(coverage_problems(self.manifest, self.data))
        self.assertIn("gives no 'why'", problems)
        self.assertIn("matches graded test(s) RadixCache.", problems)
        self.assertIn("'Nothing.*' matches no test", problems)


if __name__ == "__main__":
    unittest.main()
