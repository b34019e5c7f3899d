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

Hidden tests (docs/teaching.md) keep to their own rooms, so that the student
release can drop them whole: every lab's CPU manifest has a hidden group
("visibility" other than "visible"); a hidden group grades only tests of
tests/hidden/ files, whose suites are named Hidden*, and a visible group
grades none of them (else the release, which leaves tests/hidden/ out,
would empty a visible group, or ship a hidden test's name).

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
sys.path.insert(0, str(REPO_ROOT / "tools" / "labkit"))
from grading.gtest import matches_filter  # noqa: E402  (the grader's own filter matching)

TEST_MACRO = re.compile(r"^\s*TEST(?:_F)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.MULTILINE)
PARAMETERIZED = re.compile(r"^\s*(?:TEST_P|TYPED_TEST|TYPED_TEST_P)\(", re.MULTILINE)


def manifests():
    return sorted(REPO_ROOT.glob("labs/lab[0-9][0-9]_*/manifest*.json"))


def is_hidden_source(source):
    return source.startswith("tests/hidden/")


def test_names(manifest, data, sources=None):
    """'Suite.Test' of every test in the manifest's test sources (or in `sources`, some
    of them); AssertionError when unreadable."""
    names = []
    for source in data.get("test_sources", []) if sources is None else sources:
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


def hidden_problems(manifest, data):
    """One line per breach of the hidden tests' rooms (the module's docstring)."""
    where = manifest.relative_to(REPO_ROOT)
    sources = data.get("test_sources", [])
    hidden_names = test_names(where, data, [s for s in sources if is_hidden_source(s)])
    visible_names = test_names(where, data, [s for s in sources if not is_hidden_source(s)])
    problems = [f"{where}: {name} is in tests/hidden/ but its suite is not named Hidden*"
                for name in hidden_names if not name.startswith("Hidden")]
    problems += [f"{where}: {name} is a public test whose suite is named Hidden*"
                 for name in visible_names if name.startswith("Hidden")]
    hidden_groups = [g for g in data["groups"] if g.get("visibility", "visible") != "visible"]
    if data.get("track", "cpu") == "cpu" and not hidden_groups:
        problems.append(f"{where}: no hidden group: give the lab hidden tests (docs/teaching.md)")
    for group in data["groups"]:
        hidden = group in hidden_groups
        wrong_room = visible_names if hidden else hidden_names
        strays = [name for name in wrong_room if matches_filter(name, group["filter"])]
        if strays:
            kind = "hidden" if hidden else "visible"
            problems.append(f"{where}: the {kind} group {group['name'][:40]!r} grades "
                            f"{', '.join(strays)}, which {'is' if len(strays) == 1 else 'are'} "
                            f"not in {'tests/hidden/' if hidden else 'a public test file'}")
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

    def test_hidden_tests_keep_to_their_rooms(self):
        problems = []
        for manifest in manifests():
            problems += hidden_problems(manifest, json.loads(manifest.read_text(encoding="utf-8")))
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

    def test_a_lab_without_hidden_tests(self):
        self.data["groups"] = [dict(g, visibility="visible") for g in self.data["groups"]]
        problems = "\n".join(hidden_problems(self.manifest, self.data))
        self.assertIn("lab11_radix_attention/manifest.json: no hidden group", problems)

    def test_a_visible_group_that_grades_a_hidden_test(self):
        self.data["groups"].append({"name": "Everything", "filter": "*", "points": 1})
        problems = "\n".join(hidden_problems(self.manifest, self.data))
        self.assertIn("the visible group 'Everything' grades Hidden", problems)


if __name__ == "__main__":
    unittest.main()
