#!/usr/bin/env python3
"""test_autograder.py — the Gradescope autograder (tools/labkit/autograder/) grades what it is given.

Part of the lab framework (docs/teaching.md, "Grading on Gradescope"). Lab 5's
autograder zip is made, unpacked into a scratch folder shaped like
Gradescope's /autograder (source/, submission/, results/), and its
run_autograder is run on submissions, each in a layout Gradescope accepts.
Every results.json is checked against Gradescope's results schema (with the
jsonschema package, an implementation independent of ours) and its scores.

  test_autograder.py --build-dir build/release
      make test's part (no build; about a minute): the zip is the same bytes
      twice, holds the scripts (executable), the hidden tests and no
      instructor file; then run_autograder grades
        - the untouched skeleton (nothing submitted): 0, every group, hidden
          ones too, says "not implemented", the hidden group is hidden;
        - the reference solution, uploaded as a bare file: full marks;
        - a planted bug, uploaded at its repository path: the group its patch
          names loses points;
        - a build that fails: 0 and the build's last lines, never a crash.
      The placing of the files is what runs for real; the grading runs on the
      instructor build's binaries of those same files (SERVELAB_GRADE_ARGS:
      --no-build --student-tests ...), since building the engine afresh takes
      minutes.
  test_autograder.py --build-dir build/release --proof
      the slow proof (label "slow", several minutes): the zip's setup.sh builds
      the lab in the scratch folder as Gradescope would, and run_autograder
      compiles and grades the skeleton, the reference solution, a planted bug
      and a file that does not compile (0, with the compiler's error).
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

import jsonschema

REPO = pathlib.Path(__file__).resolve().parents[2]
LAB = 5
LAB_DIR = REPO / "labs" / "lab05_continuous_batching"
LAB_FILE = "reference/scheduler/scheduler.cpp"
BUG = "running_ignores_the_budget"

# Gradescope's results.json ("Autograder Specifications: Output Format"), written
# from its documentation: additionalProperties is false, so a misspelt key fails.
VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
RESULTS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["tests", "execution_time", "output"],
    "properties": {
        "score": {"type": "number"},
        "max_score": {"type": "number"},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "extra_data": {"type": "object"},
        "leaderboard": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["name", "value"],
            "properties": {"name": {"type": "string"}, "value": {"type": ["number", "string"]},
                           "order": {"enum": ["asc", "desc"]}}}},
        "tests": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["name", "score", "max_score", "output", "visibility"],
            "properties": {
                "name": {"type": "string"}, "score": {"type": "number"},
                "max_score": {"type": "number"}, "status": {"enum": ["passed", "failed"]},
                "number": {"type": "string"}, "output": {"type": "string"},
                "output_format": {"enum": ["text", "html", "simple_format", "md", "ansi"]},
                "tags": {"type": "array"}, "visibility": VISIBILITY,
                "extra_data": {"type": "object"}}}},
    },
}


def fail(message):
    sys.exit(f"FAIL {message}")


def make_zip(out, build_dir, build=False):
    command = [sys.executable, str(REPO / "tools" / "labkit" / "autograder" / "make_autograder.py"),
               "--lab", str(LAB), "--out", str(out), "--build-dir", str(build_dir)]
    if not build:
        command.append("--no-build")
    done = subprocess.run(command, text=True, capture_output=True)
    if done.returncode != 0:
        fail(f"make_autograder failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


def check_zip(first, second):
    if first.read_bytes() != second.read_bytes():
        fail("two autograder zips of the same tree differ")
    with zipfile.ZipFile(first) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        for script in ("setup.sh", "run_autograder"):
            if script not in infos or not (infos[script].external_attr >> 16) & 0o100:
                fail(f"{script} is missing from the zip's top, or not executable")
        if archive.read("LAB").decode().strip() != str(LAB):
            fail("the zip's LAB file does not name the lab")
        names = list(infos)
    hidden = [n for n in names if n.startswith("servelab/tests/hidden/")]
    instructors = [n for n in names if n.startswith(("servelab/tests/labs/",
                                                     "servelab/tools/labkit/mutate.py",
                                                     "servelab/tools/labkit/autograder/make_autograder.py"))]
    if not hidden or instructors:
        fail(f"the zip should hold the hidden tests ({len(hidden)}) and no planted bug, mutation "
             f"runner or zip maker ({instructors[:3]})")
    if "servelab/prebuilt/linux-x86_64/libservelab_solutions.a" not in names:
        fail("the zip has no prebuilt reference objects")
    print(f"  the zip: same bytes twice, {len(names)} files, scripts executable, "
          f"{len(hidden)} hidden test files, no instructor file: ok")


def unpack(zip_path, root):
    """A Gradescope-shaped folder: root/source holds the zip; .venv and the model are
    the instructor's (what setup.sh would install)."""
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
    for path in ("setup.sh", "run_autograder"):
        (root / "source" / path).chmod(0o755)
    servelab = root / "source" / "servelab"
    (servelab / ".venv").symlink_to(REPO / ".venv")
    shutil.rmtree(servelab / "data" / "models", ignore_errors=True)
    (servelab / "data" / "models").symlink_to(REPO / "data" / "models")
    return servelab


def run_autograder(root, files, grade_args, timeout=900):
    """Submits `files` ({path in the submission: bytes}); returns results.json."""
    submission = root / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    submission.mkdir()
    for path, content in files.items():
        (submission / path).parent.mkdir(parents=True, exist_ok=True)
        (submission / path).write_bytes(content)
    results = root / "results" / "results.json"
    results.unlink(missing_ok=True)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), SERVELAB_GRADE_ARGS=" ".join(grade_args))
    done = subprocess.run([str(root / "source" / "run_autograder")], env=env, text=True,
                          capture_output=True, timeout=timeout)
    if done.returncode != 0:
        fail(f"run_autograder exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    data = json.loads(results.read_text())
    try:
        jsonschema.validate(data, RESULTS_SCHEMA)
    except jsonschema.ValidationError as error:
        fail(f"results.json breaks Gradescope's schema: {error.message} at "
             f"{'/'.join(map(str, error.absolute_path))}")
    return data


def placed_file(servelab):
    return (servelab / LAB_DIR.relative_to(REPO) / "student" / LAB_FILE).read_bytes()


def check_skeleton(root, servelab, args):
    results = run_autograder(root, {"README.txt": b"my notes\n"}, args)
    silent = [t["name"] for t in results["tests"] if "not implemented" not in t["output"]]
    hidden = [t for t in results["tests"] if t["visibility"] == "hidden"]
    if results["score"] != 0 or silent or not hidden:
        fail(f"the skeleton: score {results['score']}, groups without 'not implemented' "
             f"{silent}, {len(hidden)} hidden group(s)")
    for expected in (f"not submitted (graded as the untouched skeleton): {LAB_FILE}",
                     "ignored (1, not files of this lab): README.txt"):
        if expected not in results["output"]:
            fail(f"the skeleton's output does not say {expected!r}:\n{results['output']}")
    print(f"  the skeleton (nothing submitted): 0/{results['max_score']}, 'not implemented' "
          f"in every group, {len(hidden)} hidden: ok")


def check_reference(root, servelab, args):
    solution = (REPO / LAB_FILE).read_bytes()
    results = run_autograder(root, {"scheduler.cpp": solution}, args)
    if results["score"] != results["max_score"] or placed_file(servelab) != solution:
        fail(f"the reference solution as a bare file: {results['score']}/{results['max_score']}"
             f" (placed: {placed_file(servelab) == solution}):\n{results['output']}")
    if f"{LAB_FILE} <- scheduler.cpp" not in results["output"]:
        fail(f"the output does not say where scheduler.cpp went:\n{results['output']}")
    print(f"  the reference solution, a bare file: {results['score']}/{results['max_score']}: ok")


def bug_group():
    """The group the planted bug's patch names (its 'Group:' header)."""
    for line in (REPO / "tests" / "labs" / "lab05" / f"{BUG}.patch").read_text().splitlines():
        if line.startswith("Group:"):
            return line.split(":", 1)[1].strip()
    fail(f"{BUG}.patch names no group")


def check_planted_bug(root, servelab, args, build_dir):
    buggy = (build_dir / "planted_bugs" / "lab05" / BUG / LAB_FILE).read_bytes()
    path = f"{LAB_DIR.relative_to(REPO).as_posix()}/student/{LAB_FILE}"
    results = run_autograder(root, {path: buggy}, args)
    group = next(t for t in results["tests"] if t["name"].startswith(bug_group()))
    if group["score"] >= group["max_score"] or placed_file(servelab) != buggy:
        fail(f"the planted bug {BUG}: its group scored {group['score']}/{group['max_score']}"
             f" (placed: {placed_file(servelab) == buggy})")
    print(f"  a planted bug at its repository path: {results['score']}/{results['max_score']},"
          f" its group {group['score']}/{group['max_score']}: ok")


def check_failed_build(root, servelab):
    unconfigured = root / "not-configured"
    unconfigured.mkdir()
    results = run_autograder(root, {}, ["--skip-throughput", f"--build-dir={unconfigured}"])
    tests = results["tests"]
    if results["score"] != 0 or [t["name"] for t in tests] != ["compilation"] \
            or "build failed" not in tests[0]["output"]:
        fail(f"a failed build: {json.dumps(results)[:1500]}")
    print(f"  a build that fails: 0/{tests[0]['max_score']} with its last lines: ok")


def fast(build_dir):
    with tempfile.TemporaryDirectory(prefix="servelab-autograder-") as scratch:
        scratch = pathlib.Path(scratch)
        print(make_zip(scratch / "a.zip", build_dir))
        make_zip(scratch / "b.zip", build_dir)
        check_zip(scratch / "a.zip", scratch / "b.zip")
        root = scratch / "autograder"
        servelab = unpack(scratch / "a.zip", root)

        def binary(name):
            return ["--no-build", "--skip-throughput", f"--student-tests={build_dir / name}"]
        check_skeleton(root, servelab, binary("lab05_tests"))
        check_reference(root, servelab, binary("lab05_tests_reference"))
        check_planted_bug(root, servelab, binary(f"lab05_bug_{BUG}_tests"), build_dir)
        check_failed_build(root, servelab)


def check_compile_error(root):
    broken = (REPO / "labs" / "lab05_continuous_batching" / "student" / LAB_FILE).read_bytes()
    broken += b"\nthis is not C++;\n"
    results = run_autograder(root, {"scheduler.cpp": broken}, ["--skip-throughput"])
    tests = results["tests"]
    if results["score"] != 0 or tests[0]["name"] != "compilation" \
            or "scheduler.cpp" not in tests[0]["output"] or "error:" not in tests[0]["output"]:
        fail(f"a file that does not compile: {json.dumps(results)[:1500]}")
    print("  a file that does not compile: 0, with the compiler's error: ok")


def proof(build_dir):
    with tempfile.TemporaryDirectory(prefix="servelab-autograder-") as scratch:
        scratch = pathlib.Path(scratch)
        make_zip(scratch / "a.zip", build_dir, build=True)
        root = scratch / "autograder"
        servelab = unpack(scratch / "a.zip", root)
        done = subprocess.run(["bash", str(root / "source" / "setup.sh")], text=True,
                              capture_output=True, timeout=3600)
        if done.returncode != 0:
            fail(f"setup.sh failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        print("  setup.sh builds the lab: ok")
        args = ["--skip-throughput"]
        check_skeleton(root, servelab, args)
        check_reference(root, servelab, args)
        check_planted_bug(root, servelab, args, build_dir)
        check_compile_error(root)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", type=pathlib.Path, required=True)
    parser.add_argument("--proof", action="store_true")
    args = parser.parse_args()
    (proof if args.proof else fast)(args.build_dir.resolve())
    print("PASS")


if __name__ == "__main__":
    main()
