#!/usr/bin/env python3
"""planted_bugs.py — the known-wrong lab solutions, kept as small patches.

Part of the lab framework (all labs; tests/labs/README.md). Each lab carries
planted bugs: plausible mistakes a student could make, each a unified diff
against the reference, one file per bug:

    tests/labs/labNN/<bug_name>.patch

A patch starts with a few `Key: value` lines, then the diff:

    Function: Scheduler::preempt
    Group: Every request equals its solo run
    Expect: blocks leaked
    Bug: preempt takes the victim off the running list but never frees its blocks

    --- a/reference/scheduler/scheduler.cpp
    +++ b/reference/scheduler/scheduler.cpp
    @@ -181,7 +181,6 @@ ...

- Function: the function the bug is in; a lab's bugs spread over at least three
  functions (two bugs may share one: two different ways to get it wrong).
- Group: the start of the manifest group that must catch it (a unique prefix of
  its name); a lab's bugs are caught by different groups.
- Expect: text the failure output of that group must contain (any case): the
  test's message names the mistake, in the student's terms.
- Bug: one sentence, for tests/labs/README.md and the generated file's first line.
- Track: `cuda` for a bug in a GPU-track kernel (.cu; default `cpu`).

The build (labs/labs.cmake) writes each bug's files under
build/<preset>/planted_bugs/labNN/<bug_name>/<repository path> and links them in
front of the reference engine as labNN_bug_<bug_name>_tests; the self-test
grade_labNN_bug_<bug_name> (tests/tools/grade_planted_bug.py) checks that the
group scores below full marks and prints that message. A patch that no longer
applies to the reference fails the build and `planted_bugs.py check`, naming
the hunk.

Usage:
    planted_bugs.py check                     every patch applies, every rule holds
    planted_bugs.py list [--lab N]            one line per bug
    planted_bugs.py cmake OUT.cmake           the bug list for labs/labs.cmake
    planted_bugs.py apply PATCH OUTDIR        write PATCH's files under OUTDIR
    planted_bugs.py make-patch REFERENCE_FILE EDITED_FILE
                                              print a diff to start a new patch from
    planted_bugs.py report [--build-dir build/release]
                                              grade every cpu-track bug's build and print
                                              the table of tests/labs/README.md: each bug,
                                              the score of its group and the message

Standard library only.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import pathlib
import re
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
BUGS_DIR = REPO_ROOT / "tests" / "labs"
LAB_DIR = re.compile(r"^lab(\d\d)$")
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
KEYS = {"Function", "Group", "Expect", "Bug", "Track"}
REQUIRED = ("Function", "Group", "Expect", "Bug")
MIN_BUGS_PER_LAB = 3


class PatchError(Exception):
    """A malformed patch, or one that no longer applies; the message names it."""


@dataclasses.dataclass
class Hunk:
    old_start: int  # 1-based line in the reference file
    old: list       # lines the reference must have (context and removed)
    new: list       # lines that replace them (context and added)


@dataclasses.dataclass
class FilePatch:
    path: str       # repository path, e.g. reference/scheduler/scheduler.cpp
    hunks: list


@dataclasses.dataclass
class Bug:
    lab: int
    name: str
    patch_path: pathlib.Path
    function: str
    group: str      # the full manifest group name (resolved from the prefix)
    expect: str
    description: str
    track: str
    files: list     # FilePatch

    @property
    def tag(self):
        return f"lab{self.lab:02d}"

    @property
    def paths(self):
        return [f.path for f in self.files]


# ---------------------------------------------------------------- parsing

def parse_header(lines, where):
    """The `Key: value` lines before the diff (continuation lines start with spaces)."""
    fields, key = {}, None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            key = None
            continue
        if line[0] in " \t" and key:
            fields[key] += " " + line.strip()
            continue
        match = re.match(r"^([A-Za-z]+):\s*(.*)$", line)
        if not match or match[1] not in KEYS:
            raise PatchError(f"{where}:{number}: expected 'Key: value' with a key among "
                             f"{', '.join(sorted(KEYS))}, got {line.strip()!r}")
        key = match[1]
        if key in fields:
            raise PatchError(f"{where}:{number}: {key} is given twice")
        fields[key] = match[2].strip()
    for key in REQUIRED:
        if not fields.get(key):
            raise PatchError(f"{where}: the header needs a '{key}:' line")
    track = fields.get("Track", "cpu")
    if track not in ("cpu", "cuda"):
        raise PatchError(f"{where}: Track must be cpu or cuda, not {track!r}")
    fields["Track"] = track
    return fields


def strip_prefix(path_field, where):
    path = path_field.split("\t")[0].strip()
    if not path.startswith(("a/", "b/")):
        raise PatchError(f"{where}: file names in the diff must start with a/ and b/: {path!r}")
    path = path[2:]
    if path.startswith("/") or ".." in pathlib.PurePosixPath(path).parts:
        raise PatchError(f"{where}: {path!r} is not a repository path")
    return path


def parse_diff(lines, first_line, where):
    """FilePatches of a unified diff (lines without their newlines)."""
    files, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("--- "):
            if line.strip():
                raise PatchError(f"{where}:{first_line + i}: expected '--- a/<path>', got {line!r}")
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError(f"{where}:{first_line + i}: '---' without a '+++' line after it")
        old_path = strip_prefix(line[4:], where)
        new_path = strip_prefix(lines[i + 1][4:], where)
        if old_path != new_path:
            raise PatchError(f"{where}:{first_line + i}: a patch may not rename files")
        i += 2
        hunks = []
        while i < len(lines) and lines[i].startswith("@@"):
            match = HUNK.match(lines[i])
            if not match:
                raise PatchError(f"{where}:{first_line + i}: malformed hunk header {lines[i]!r}")
            old_count = int(match[2]) if match[2] is not None else 1
            new_count = int(match[4]) if match[4] is not None else 1
            hunk, i = Hunk(int(match[1]), [], []), i + 1
            while len(hunk.old) < old_count or len(hunk.new) < new_count:
                if i >= len(lines):
                    raise PatchError(f"{where}: the hunk at line {match[1]} of {old_path} ends early")
                body = lines[i]
                kind, text = (body[0], body[1:]) if body else (" ", "")
                if kind == " ":
                    hunk.old.append(text)
                    hunk.new.append(text)
                elif kind == "-":
                    hunk.old.append(text)
                elif kind == "+":
                    hunk.new.append(text)
                elif kind == "\\":  # "\ No newline at end of file"
                    pass
                else:
                    raise PatchError(f"{where}:{first_line + i}: unexpected diff line {body!r}")
                i += 1
            if len(hunk.old) != old_count or len(hunk.new) != new_count:
                raise PatchError(f"{where}: the hunk at line {match[1]} of {old_path} has the "
                                 f"wrong number of lines for its header")
            hunks.append(hunk)
        if not hunks:
            raise PatchError(f"{where}: {old_path} has no hunks")
        files.append(FilePatch(old_path, hunks))
    if not files:
        raise PatchError(f"{where}: no diff found (a '--- a/<path>' line starts it)")
    return files


def load_manifest_groups(lab):
    folders = sorted((REPO_ROOT / "labs").glob(f"lab{lab:02d}_*"))
    if len(folders) != 1:
        raise PatchError(f"no single lab folder labs/lab{lab:02d}_<name>/")
    groups = {}
    for manifest_name in ("manifest.json", "manifest_cuda.json"):
        manifest = folders[0] / manifest_name
        if manifest.is_file():
            track = "cpu" if manifest_name == "manifest.json" else "cuda"
            data = json.loads(manifest.read_text(encoding="utf-8"))
            groups[track] = [group["name"] for group in data.get("groups", [])]
    return groups


def resolve_group(prefix, names, where):
    exact = [name for name in names if name == prefix]
    matches = exact or [name for name in names if name.startswith(prefix)]
    if len(matches) != 1:
        raise PatchError(f"{where}: Group {prefix!r} must be the start of exactly one group "
                         f"of the manifest; it matches {len(matches)}: {matches or names}")
    return matches[0]


def load_bug(patch_path, manifest_groups=None):
    where = str(patch_path.relative_to(REPO_ROOT)) if patch_path.is_relative_to(REPO_ROOT) else str(patch_path)
    lab_match = LAB_DIR.match(patch_path.parent.name)
    if not lab_match:
        raise PatchError(f"{where}: a patch lives in tests/labs/labNN/")
    lab = int(lab_match[1])
    lines = patch_path.read_text(encoding="utf-8").split("\n")
    diff_start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), None)
    if diff_start is None:
        raise PatchError(f"{where}: no diff found (a '--- a/<path>' line starts it)")
    fields = parse_header(lines[:diff_start], where)
    files = parse_diff(lines[diff_start:], diff_start + 1, where)
    groups = (manifest_groups or load_manifest_groups(lab)).get(fields["Track"])
    if not groups:
        raise PatchError(f"{where}: lab {lab} has no {fields['Track']} manifest")
    group = resolve_group(fields["Group"], groups, where)
    name = patch_path.stem
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise PatchError(f"{where}: a bug's name (the file name) is lower_case_with_underscores")
    for file in files:
        cuda = file.path.endswith((".cu", ".cuh"))
        if cuda != (fields["Track"] == "cuda"):
            raise PatchError(f"{where}: {file.path}: a cuda-track bug patches .cu files, "
                             "a cpu-track bug the others")
    return Bug(lab, name, patch_path, fields["Function"], group, fields["Expect"], fields["Bug"],
               fields["Track"], files)


def load_bugs(lab=None):
    """Every bug under tests/labs/labNN/ (or lab N's), sorted by lab and name."""
    bugs = []
    for folder in sorted(BUGS_DIR.glob("lab[0-9][0-9]")):
        number = int(folder.name[3:])
        if lab is not None and number != lab:
            continue
        groups = load_manifest_groups(number)
        bugs.extend(load_bug(path, groups) for path in sorted(folder.glob("*.patch")))
    return bugs


# ---------------------------------------------------------------- applying

def find_hunk(lines, hunk, start_hint):
    """Index where hunk.old occurs in lines: at the hint if it matches there, else the
    one place it occurs; None when it occurs nowhere or in several places."""
    size = len(hunk.old)
    if lines[start_hint:start_hint + size] == hunk.old:
        return start_hint
    places = [i for i in range(len(lines) - size + 1) if lines[i:i + size] == hunk.old]
    return places[0] if len(places) == 1 else None


def apply_file_patch(text, file_patch, where):
    """The patched text; PatchError naming the hunk that does not apply."""
    lines = text.split("\n")
    offset = 0
    for number, hunk in enumerate(file_patch.hunks, start=1):
        hint = max(0, hunk.old_start - 1 + offset) if hunk.old else hunk.old_start + offset
        at = find_hunk(lines, hunk, hint)
        if at is None:
            first = next((line for line in hunk.old if line.strip()), "")
            raise PatchError(f"{where}: hunk {number} (line {hunk.old_start}) no longer applies to "
                             f"{file_patch.path}: its lines, from {first.strip()!r}, are not in "
                             f"the reference (exactly once); update the patch")
        lines[at:at + len(hunk.old)] = hunk.new
        offset = at + len(hunk.new) - (hunk.old_start - 1) - len(hunk.old)
    return "\n".join(lines)


def patched_files(bug, root=REPO_ROOT):
    """{repository path: patched text} of one bug, with a first line that names it."""
    where = str(bug.patch_path.relative_to(REPO_ROOT))
    out = {}
    for file_patch in bug.files:
        source = pathlib.Path(root) / file_patch.path
        if not source.is_file():
            raise PatchError(f"{where}: {file_patch.path} does not exist")
        text = apply_file_patch(source.read_text(encoding="utf-8"), file_patch, where)
        if text == source.read_text(encoding="utf-8"):
            raise PatchError(f"{where}: the patch changes nothing in {file_patch.path}")
        banner = f"// PLANTED BUG {bug.tag}/{bug.name} ({where}): {bug.description}\n"
        out[file_patch.path] = banner + text
    return out


def write_bug(bug, out_dir):
    for path, text in patched_files(bug).items():
        target = pathlib.Path(out_dir) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- rules

def check_rules(bugs):
    """Problems with a lab's set of bugs: too few, shared functions or groups."""
    problems = []
    by_lab = {}
    for bug in bugs:
        by_lab.setdefault((bug.lab, bug.track), []).append(bug)
    labs = sorted({int(p.name[3:5]) for p in (REPO_ROOT / "labs").glob("lab[0-9][0-9]_*")
                   if (p / "manifest.json").is_file()})
    for lab in labs:
        cpu = by_lab.get((lab, "cpu"), [])
        if len(cpu) < MIN_BUGS_PER_LAB:
            problems.append(f"lab {lab:02d} has {len(cpu)} planted bug(s); it needs at least "
                            f"{MIN_BUGS_PER_LAB} (tests/labs/lab{lab:02d}/*.patch)")
    for (lab, track), members in by_lab.items():
        seen = {}
        for bug in members:
            if bug.group in seen and track == "cpu":
                problems.append(f"lab {lab:02d}: {bug.name} and {seen[bug.group]} share the "
                                f"group {bug.group!r}; each bug needs its own")
            seen.setdefault(bug.group, bug.name)
        # Two mistakes in one function are allowed (a function can go wrong in
        # two ways a student makes, which different groups must each catch),
        # but the bugs must spread over at least MIN_BUGS_PER_LAB functions.
        functions = {bug.function for bug in members}
        if track == "cpu" and len(members) >= MIN_BUGS_PER_LAB \
                and len(functions) < MIN_BUGS_PER_LAB:
            problems.append(f"lab {lab:02d}: its {len(members)} bugs are in {len(functions)} "
                            f"function(s) ({', '.join(sorted(functions))}); they must spread "
                            f"over at least {MIN_BUGS_PER_LAB}")
        # cuda-track bugs may share a kernel file (Lab 9's three are all in
        # its tile loop): each is built and graded alone, and the build of
        # all of them at once takes the first of each file (labs/labs.cmake).
    return problems


# ---------------------------------------------------------------- commands

def cmake_string(value):
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def write_cmake(bugs, out_path):
    """A CMake file that sets SERVELAB_PLANTED_BUGS (lab_name entries) and, per bug,
    SERVELAB_BUG_<lab>_<name>_{PATCH,FILES,TRACK,GROUP}."""
    lines = ["# Generated by tools/labkit/planted_bugs.py from tests/labs/labNN/*.patch; do not edit.",
             f"set(SERVELAB_PLANTED_BUGS {' '.join(f'{b.tag}_{b.name}' for b in bugs)})"]
    for bug in bugs:
        key = f"SERVELAB_BUG_{bug.tag}_{bug.name}"
        lines.append(f"set({key}_LAB {bug.tag})")
        lines.append(f"set({key}_NAME {bug.name})")
        lines.append(f"set({key}_PATCH {cmake_string(str(bug.patch_path))})")
        lines.append(f"set({key}_FILES {' '.join(bug.paths)})")
        lines.append(f"set({key}_TRACK {bug.track})")
    text = "\n".join(lines) + "\n"
    out_path = pathlib.Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if not out_path.is_file() or out_path.read_text(encoding="utf-8") != text:
        out_path.write_text(text, encoding="utf-8")


def command_check(_args):
    bugs = load_bugs()
    problems = check_rules(bugs)
    with tempfile.TemporaryDirectory(prefix="planted-bugs-") as scratch:
        for bug in bugs:
            try:
                write_bug(bug, pathlib.Path(scratch) / bug.tag / bug.name)
            except PatchError as error:
                problems.append(str(error))
    for problem in problems:
        print(f"planted_bugs: {problem}", file=sys.stderr)
    labs = sorted({bug.lab for bug in bugs})
    print(f"planted_bugs: {len(bugs)} bugs in {len(labs)} labs: "
          f"{'all apply' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def command_list(args):
    for bug in load_bugs(args.lab):
        track = "" if bug.track == "cpu" else " [cuda]"
        print(f"{bug.tag} {bug.name}{track}: {bug.function} — caught by '{bug.group}' "
              f"(expects {bug.expect!r}): {bug.description}")
    return 0


def command_cmake(args):
    write_cmake(load_bugs(), args.out)
    return 0


def command_apply(args):
    patch = pathlib.Path(args.patch).resolve()
    write_bug(load_bug(patch), args.out_dir)
    return 0


def command_make_patch(args):
    reference = pathlib.Path(args.reference).resolve()
    path = reference.relative_to(REPO_ROOT).as_posix()
    old = reference.read_text(encoding="utf-8").splitlines(keepends=True)
    new = pathlib.Path(args.edited).read_text(encoding="utf-8").splitlines(keepends=True)
    sys.stdout.write("Function: \nGroup: \nExpect: \nBug: \n\n")
    sys.stdout.writelines(difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", n=2))
    return 0


def command_report(args):
    """Runs tests/tools/grade_planted_bug.py on every cpu-track bug's test binary."""
    import subprocess
    checker = REPO_ROOT / "tests" / "tools" / "grade_planted_bug.py"
    rows, failed = [], 0
    for bug in load_bugs():
        if bug.track != "cpu":
            continue
        binary = pathlib.Path(args.build_dir).resolve() / f"{bug.tag}_bug_{bug.name}_tests"
        run = subprocess.run([sys.executable, str(checker), "--lab", str(bug.lab), "--bug",
                              bug.name, "--student-tests", str(binary)],
                             capture_output=True, text=True)
        first = (run.stdout.splitlines() or [""])[0]
        match = re.search(r"scored (\S+); message: (.*)$", first)
        score, message = (match[1], match[2]) if match else ("?", run.stderr.strip()[:200])
        failed += run.returncode != 0
        status = "" if run.returncode == 0 else " **(check failed)**"
        rows.append(f"| {bug.lab} | `{bug.name}` | `{bug.function}` | {bug.group.split(':')[0]} | "
                    f"{score}{status} | {message.replace('|', '/')} |")
    print("| lab | planted bug | in | caught by the group | its score | the message it printed |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 1 if failed else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="every patch applies and the rules hold")
    listing = commands.add_parser("list", help="one line per bug")
    listing.add_argument("--lab", type=int)
    cmake = commands.add_parser("cmake", help="write the bug list for labs/labs.cmake")
    cmake.add_argument("out")
    apply = commands.add_parser("apply", help="write one bug's patched files")
    apply.add_argument("patch")
    apply.add_argument("out_dir")
    make_patch = commands.add_parser("make-patch", help="print a patch to start from")
    make_patch.add_argument("reference")
    make_patch.add_argument("edited")
    report = commands.add_parser("report", help="grade every bug's build; print the table")
    report.add_argument("--build-dir", default=str(REPO_ROOT / "build" / "release"))
    args = parser.parse_args(argv)
    handlers = {"check": command_check, "list": command_list, "cmake": command_cmake,
                "apply": command_apply, "make-patch": command_make_patch,
                "report": command_report}
    try:
        return handlers[args.command](args)
    except PatchError as error:
        print(f"planted_bugs: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
