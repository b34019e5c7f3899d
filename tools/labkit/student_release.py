#!/usr/bin/env python3
"""student_release.py — cut the course's student release from this (the instructor's) tree.

Part of the lab framework (docs/teaching.md). The instructor's tree holds the
solution of every exercise, between `// BEGIN SOLUTION labNN` and
`// END SOLUTION` in reference/ and kernels/. A student release is a
standalone tree without them that still builds, chats, benchmarks and grades:

  - every tracked file, except the instructor's own (INSTRUCTOR_ONLY below:
    planted bugs, the hidden tests, the mutation runner, the grader's
    self-tests, this tool);
  - each lab's manifests without their hidden groups (a group whose
    "visibility" is not "visible") and without the test sources of
    tests/hidden/; "hidden_points" says how many points the course's
    autograder grades beyond them (tools/labkit/grade.py prints it);
  - each file with solution regions replaced by its skeleton, byte for byte
    the copy in labs/labNN_*/student/ (tools/labkit/make_skeletons.py writes both);
  - the reference versions of those files as compiled objects only:
    prebuilt/linux-x86_64/libservelab_solutions.a, one member <exercise id>.o
    per file, debug sections stripped, archived deterministically, which
    cmake/prebuilt_solutions.cmake links where this tree compiles the
    solutions;
  - README.md written for students (tools/labkit/release/README.md), and RELEASE:
    the source commit and its date.

The same tree and build give the same bytes: files are copied, not
regenerated with times, and the archive has no timestamps or owners.

Every release is leak-checked, and a leak fails it: no text file of the
release may hold a distinctive line of a solution region. A region's lines
are compared after collapsing whitespace; a line is distinctive unless it is
a comment, has fewer than MIN_DISTINCTIVE_CHARS characters, or also occurs
in code the release ships outside every region (`}`, `return out;`, a test's
loop): what students see anyway names no solution. Prose, handouts and
notebooks get no such pass. Each leak is named by file, line and region.
Notebooks are checked cell by cell.

Usage:
  student_release.py --out DIR [--build-dir build/release]   cut a release into DIR
                                                               (DIR must be empty or absent)
  student_release.py --out DIR --no-build                     archive the objects as built
  student_release.py --out DIR --no-prebuilt                  skip the archive
  student_release.py --leak-check DIR                         only check an existing release
  student_release.py --out DIR --with-hidden                  keep the hidden tests and full
                                                               manifests: the autograder's tree
                                                               (tools/labkit/autograder/make_autograder.py)
Exit status: 0, or 1 with one line per problem.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import fnmatch
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_skeletons  # noqa: E402  (same folder: the regions and their skeletons)

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Paths (fnmatch patterns, relative to the root) that stay with the instructor.
INSTRUCTOR_ONLY = [
    "tests/labs/*",                      # planted bugs: patches that print solution lines
    "tools/labkit/mutate.py",            # mutation testing mutates the solutions
    "tools/labkit/planted_bugs.py",
    "tools/labkit/make_skeletons.py",    # regions -> skeletons; a release has no regions
    "tools/labkit/student_release.py",   # this tool
    "tools/labkit/autograder/make_autograder.py",  # the autograder's zip holds the hidden tests
    "tests/hidden/*",                    # hidden tests (manifest groups with "visibility")
    "tools/labkit/release/*",            # its templates (README.md becomes the release's)
    "tests/tools/test_mutate.py",
    "tests/tools/test_make_skeletons.py",
    "tests/tools/test_student_release.py",
    "tests/tools/check_grade.py",        # the grader's self-tests (labs/labs.cmake)
    "tests/tools/grade_planted_bug.py",
    "docs/teaching.md",                  # the instructor's guide
    ".ci/*",                             # the instructor tree's CI
]
STUDENT_README = "tools/labkit/release/README.md"
PREBUILT_ARCHIVE = "prebuilt/linux-x86_64/libservelab_solutions.a"
MIN_DISTINCTIVE_CHARS = 8  # after collapsing whitespace: shorter lines are too common to name


def run(command, cwd=ROOT, **kwargs):
    return subprocess.run(command, cwd=cwd, check=True, text=True, capture_output=True, **kwargs)


# ---------------------------------------------------------------- what goes in


def tracked_files(root):
    """Every file of the tree under `root` that git tracks or would (not ignored), as
    sorted relative POSIX paths: build outputs, .venv and the model stay out."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 cwd=root).stdout.split("\0")
    return sorted(path for path in listed if path and (root / path).is_file())


def instructor_only(path):
    return any(fnmatch.fnmatch(path, pattern) for pattern in INSTRUCTOR_ONLY)


def skeleton_sources(root):
    """{reference path: skeleton bytes} for every file with solution regions; refuses a
    tree whose labs/*/student/ copies are out of date (they ship as they are)."""
    skeletons, errors = make_skeletons.generate(root)
    if errors:
        raise SystemExit("student_release: the solution regions have errors:\n" + "\n".join(errors))
    stale = [path.as_posix() for path, content in skeletons.items()
             if not (root / path).is_file() or (root / path).read_bytes() != content]
    if stale:
        raise SystemExit(f"student_release: {make_skeletons.OUT_OF_DATE} ({', '.join(stale)})")
    by_source = {}
    for student_path, content in skeletons.items():
        parts = student_path.parts  # labs/labNN_x/student/<source path>
        by_source["/".join(parts[3:])] = content
    return by_source


def source_commit(root):
    """(commit, date YYYY-MM-DD, whether the tree differs from it)."""
    commit = run(["git", "rev-parse", "HEAD"], cwd=root).stdout.strip()
    date = run(["git", "log", "-1", "--format=%cs", "HEAD"], cwd=root).stdout.strip()
    dirty = bool(run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root).stdout)
    return commit, date, dirty


def release_note(root):
    commit, date, dirty = source_commit(root)
    state = "with uncommitted changes" if dirty else "clean"
    return (f"servelab student release\n"
            f"source commit: {commit} ({state})\n"
            f"source date:   {date}\n"
            f"prebuilt:      {PREBUILT_ARCHIVE} (reference exercise objects, Linux x86-64)\n")


def is_manifest(path):
    return fnmatch.fnmatch(path, "labs/lab[0-9][0-9]_*/manifest*.json")


def is_hidden_source(path):
    return path.startswith("tests/hidden/")


def public_manifest(text):
    """A lab manifest without its hidden groups and hidden test sources, plus
    "hidden_points": their points. Written one group per line, as the
    instructor's are, with no timestamps: the same input gives the same bytes."""
    data = json.loads(text)
    groups = data.get("groups", [])
    hidden = [g for g in groups if g.get("visibility", "visible") != "visible"]
    if not hidden:
        return text
    data["groups"] = [g for g in groups if g not in hidden]
    data["test_sources"] = [s for s in data.get("test_sources", []) if not is_hidden_source(s)]
    points = sum(g.get("points", 0) for g in hidden)
    data["hidden_points"] = int(points) if float(points).is_integer() else points
    return format_manifest(data)


def format_manifest(data):
    """JSON with one line per top-level key and per element of a list of objects."""
    lines = []
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            items = ",\n".join(f"    {json.dumps(v, ensure_ascii=False)}" for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def release_files(root, with_hidden):
    """The tree's files that go into a release, in order."""
    for path in tracked_files(root):
        if path == "README.md":
            continue
        if instructor_only(path) and not (with_hidden and is_hidden_source(path)):
            continue
        yield path


def copy_tree(root, out, with_hidden=False):
    """Writes the release's source files into `out`; returns how many. `with_hidden`
    keeps the hidden tests and the manifests whole (the autograder's tree)."""
    skeletons = skeleton_sources(root)
    count = 0
    for path in release_files(root, with_hidden):
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if path in skeletons:
            target.write_bytes(skeletons[path])
        elif is_manifest(path) and not with_hidden:
            target.write_text(public_manifest((root / path).read_text(encoding="utf-8")),
                              encoding="utf-8")
        else:
            shutil.copyfile(root / path, target)
        count += 1
    shutil.copyfile(root / STUDENT_README, out / "README.md")
    (out / "RELEASE").write_text(release_note(root))
    return count + 2


# ---------------------------------------------------------------- the prebuilt reference


def solution_objects(build_dir):
    """[(exercise id, object path)] from the build's solution_objects.txt (CMakeLists.txt)."""
    listing = build_dir / "solution_objects.txt"
    if not listing.is_file():
        raise SystemExit(f"student_release: {listing} is missing: configure {build_dir} from "
                         "the instructor's tree first (cmake --preset release)")
    pairs = []
    for line in listing.read_text().splitlines():
        if line.strip():
            exercise_id, object_path = line.split(" ", 1)
            pairs.append((exercise_id, pathlib.Path(object_path)))
    return sorted(pairs)


def write_prebuilt(build_dir, out, build=True):
    """Builds the reference objects (unless `build` is false: they must be there) and
    archives them as PREBUILT_ARCHIVE under `out`."""
    if build:
        print(f"student_release: building the reference objects in {build_dir}", flush=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "servelab_core"],
                       check=True)
    archive = out / PREBUILT_ARCHIVE
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        members = []
        for exercise_id, object_path in solution_objects(build_dir):
            if not object_path.is_file():
                raise SystemExit(f"student_release: {object_path} is not built (build "
                                 f"{build_dir}'s servelab_core first)")
            member = pathlib.Path(scratch) / f"{exercise_id}.o"
            shutil.copyfile(object_path, member)
            # Symbols for linking and nothing else: no debug sections, no compiler note.
            run(["strip", "--strip-debug", "--remove-section=.comment", str(member)])
            members.append(member.name)
        # D: deterministic (no timestamps, owners or modes); members in sorted order.
        run(["ar", "rcD", str(archive), *members], cwd=scratch)
    return len(members)


# ---------------------------------------------------------------- the leak check


@dataclasses.dataclass(frozen=True)
class RegionLabel:
    path: str   # the instructor's source file
    line: int   # its BEGIN SOLUTION line
    lab: str

    def __str__(self):
        return f"lab{self.lab} region {self.path}:{self.line}"


@dataclasses.dataclass(frozen=True)
class HiddenTestLabel:
    path: str   # the hidden test file

    def __str__(self):
        return f"hidden test {self.path}"


def normalise(line):
    return " ".join(line.split())


def is_comment(text):
    return text.startswith("//") or text.startswith("/*") or text.startswith("*")


CODE_SUFFIXES = (".cpp", ".h", ".cu", ".cuh", ".py")


def region_lines(root, hidden_tests=True):
    """({normalised solution line: its first region}, {normalised line of code outside
    every region}). "Outside" is any code file the release ships (tests, tools, the
    engine) less the regions: what the students see anyway is no leak. With
    `hidden_tests`, every line of tests/hidden/ counts as inside too (a release
    without them must not quote them)."""
    inside, outside = {}, set()
    for name in tracked_files(root):
        if hidden_tests and is_hidden_source(name) and name.endswith(CODE_SUFFIXES):
            text = (root / name).read_text(encoding="utf-8", errors="replace")
            for line in text.splitlines():
                inside.setdefault(normalise(line), HiddenTestLabel(name))
            continue
        if not name.endswith(CODE_SUFFIXES) or instructor_only(name):
            continue
        text = (root / name).read_bytes().decode("utf-8", errors="surrogateescape")
        lines = make_skeletons.split_lines(text)
        regions = []
        if name.split("/")[0] in make_skeletons.SOURCE_DIRS:
            regions, _ = make_skeletons.parse_regions(name, lines)
        in_region = set()
        for region in regions:
            label = RegionLabel(name, region.begin, region.lab)
            for number in range(region.begin + 1, region.end):
                inside.setdefault(normalise(lines[number - 1]), label)
            in_region.update(range(region.begin, region.end + 1))
        outside.update(normalise(line) for number, line in enumerate(lines, start=1)
                       if number not in in_region)
    return inside, outside


def distinctive_lines(root, hidden_tests=True):
    """{normalised line: region or hidden test} for the lines whose presence anywhere
    is a leak."""
    inside, outside = region_lines(root, hidden_tests)
    return {line: label for line, label in inside.items()
            if len(line) >= MIN_DISTINCTIVE_CHARS and not is_comment(line)
            and line not in outside}


def text_lines(path):
    """The lines a reader sees in `path`: a notebook's cell sources, else its text;
    None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    text = data.decode("utf-8", errors="replace")
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text).get("cells", [])
            text = "\n".join("".join(cell.get("source", [])) for cell in cells)
        except (json.JSONDecodeError, AttributeError):
            pass  # not a notebook after all: checked as text
    return text.splitlines()


def find_leaks(release, distinctive):
    """['file:line: quotes <region>: <line>'] for every distinctive line in `release`."""
    leaks = []
    for path in sorted(p for p in release.rglob("*") if p.is_file()):
        lines = text_lines(path)
        for number, line in enumerate(lines or [], start=1):
            label = distinctive.get(normalise(line))
            if label:
                relative = path.relative_to(release).as_posix()
                leaks.append(f"{relative}:{number}: quotes {label}: {normalise(line)[:80]}")
    return leaks


# ---------------------------------------------------------------- commands


def cut(root, out, build_dir, prebuilt, build=True, with_hidden=False):
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"student_release: {out} is not empty; give a new folder")
    out.mkdir(parents=True, exist_ok=True)
    count = copy_tree(root, out, with_hidden)
    objects = write_prebuilt(build_dir, out, build) if prebuilt else 0
    leaks = find_leaks(out, distinctive_lines(root, hidden_tests=not with_hidden))
    for leak in leaks:
        print(f"leak: {leak}", file=sys.stderr)
    if leaks:
        print(f"student_release: {len(leaks)} solution lines leak into {out}: the release is "
              "not fit to hand out (move the text, or list the file in INSTRUCTOR_ONLY)",
              file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"student_release: {out}: {count} files, {objects} prebuilt objects, "
          f"{size / 2**20:.1f} MiB; leak check passed ({datetime.date.today()})")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, help="the release folder to write")
    parser.add_argument("--build-dir", type=pathlib.Path, default=ROOT / "build" / "release",
                        help="the instructor's configured release build (for the objects)")
    parser.add_argument("--no-prebuilt", action="store_true",
                        help="write no prebuilt archive (for the leak check's tests)")
    parser.add_argument("--no-build", action="store_true",
                        help="archive the reference objects as they are built (make test)")
    parser.add_argument("--leak-check", type=pathlib.Path, metavar="DIR",
                        help="only check the release in DIR for solution lines")
    parser.add_argument("--with-hidden", action="store_true",
                        help="keep the hidden tests and whole manifests (the autograder's "
                             "tree, never the students')")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the instructor's tree (default: this one)")
    args = parser.parse_args(argv)
    if args.leak_check:
        leaks = find_leaks(args.leak_check, distinctive_lines(args.root))
        for leak in leaks:
            print(f"leak: {leak}")
        print(f"leak check: {len(leaks)} solution lines found in {args.leak_check}")
        return 1 if leaks else 0
    if not args.out:
        parser.error("give --out DIR (or --leak-check DIR)")
    return cut(args.root, args.out.resolve(), args.build_dir.resolve(), not args.no_prebuilt,
               not args.no_build, args.with_hidden)


if __name__ == "__main__":
    sys.exit(main())
