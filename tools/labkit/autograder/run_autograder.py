#!/usr/bin/env python3
"""run_autograder.py — grade one lab submission on Gradescope (or a machine shaped like it).

Part of the lab framework (docs/teaching.md, "Grading on Gradescope"). The
course's autograder zip (tools/labkit/autograder/make_autograder.py) holds this tree
under /autograder/source/servelab/. Gradescope runs two steps there:

  setup.sh        once, when it builds the image: `run_autograder.py --lab N --setup`
                  configures the release build and builds the lab's targets, so
                  that grading a submission only compiles the student's files;
  run_autograder  for every submission: `run_autograder.py --lab N`, which
    1. places the submitted files: each of the lab's files (the paths under
       labs/labNN_<name>/student/) is taken from /autograder/submission, found
       under its repository path (labs/labNN_<name>/student/<path>), its path
       in the engine (reference/..., kernels/...), or its bare file name at any
       depth (the files uploaded on their own). A lab file not found is graded
       as the untouched skeleton, and the output says so;
    2. runs tools/labkit/grade.py (build, tests with the hidden groups, speed), which
       writes /autograder/results/results.json in Gradescope's schema. A
       compile error is one failing "compilation" entry with the compiler's
       last lines, worth the whole lab;
    3. puts what it placed (and what it did not) at the top of the results'
       "output".

Whatever goes wrong, a results.json is written (a failing "autograder error"
entry) and the exit status is 0: Gradescope shows a results file, and would
show only "the autograder failed" for a non-zero exit.

Environment: AUTOGRADER_ROOT (default /autograder) moves the submission and
results folders, for a local run; SERVELAB_GRADE_ARGS adds arguments to
grade.py (shell words, e.g. "--skip-throughput" for a quick check).

Usage: run_autograder.py --lab N [--setup]
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.dont_write_bytecode = True
sys.path.insert(0, str(REPO_ROOT / "tools" / "labkit"))
import grading.build  # noqa: E402  (the grader: its manifest reading, build targets and results)
import grading.manifest  # noqa: E402
import grading.results  # noqa: E402

BUILD_DIR = REPO_ROOT / "build" / "release"
IGNORED_PARTS = ("__MACOSX", ".git", "__pycache__")


# ---------------------------------------------------------------- placing the submission

@dataclass
class Placement:
    """What was done with a submission's files."""
    placed: list = field(default_factory=list)     # (lab file, submitted path)
    missing: list = field(default_factory=list)    # lab files not submitted
    ambiguous: list = field(default_factory=list)  # (lab file, [submitted paths])
    ignored: list = field(default_factory=list)    # submitted files that are no lab file

    def report(self):
        total = len(self.placed) + len(self.missing) + len(self.ambiguous)
        lines = [f"submission: {len(self.placed)} of {total} lab file(s) found"]
        lines += [f"  {lab_file} <- {submitted}" for lab_file, submitted in self.placed]
        for lab_file, candidates in self.ambiguous:
            lines.append(f"  {lab_file}: not placed, {len(candidates)} files could be it "
                         f"({', '.join(candidates)}); submit it at its repository path")
        if self.missing:
            lines.append("not submitted (graded as the untouched skeleton): "
                         + ", ".join(self.missing))
        if self.ignored:
            shown = ", ".join(self.ignored[:10]) + (" ..." if len(self.ignored) > 10 else "")
            lines.append(f"ignored ({len(self.ignored)}, not files of this lab): {shown}")
        return "\n".join(lines)


def submitted_files(submission):
    """Relative POSIX paths of the submission's files, without archive litter."""
    if not submission.is_dir():
        return []
    found = []
    for path in sorted(submission.rglob("*")):
        relative = path.relative_to(submission)
        if path.is_file() and not any(part in IGNORED_PARTS or part.startswith(".")
                                      for part in relative.parts):
            found.append(relative.as_posix())
    return found


def candidates_for(lab_file, student_prefix, submitted):
    """The submitted paths that could be `lab_file`, best kind first: its path in the
    student folder, its path in the engine, the path's end, its bare name."""
    name = lab_file.rsplit("/", 1)[-1]
    kinds = [
        [s for s in submitted if s == student_prefix + lab_file or s.endswith("/" + student_prefix + lab_file)],
        [s for s in submitted if s == lab_file],
        [s for s in submitted if s.endswith("/" + lab_file)],
        [s for s in submitted if s.rsplit("/", 1)[-1] == name],
    ]
    return next((kind for kind in kinds if kind), [])


def place_submission(submission, student_dir):
    """Copies the submitted lab files over the skeletons in `student_dir`."""
    lab_files = sorted(p.relative_to(student_dir).as_posix()
                       for p in student_dir.rglob("*") if p.is_file())
    student_prefix = student_dir.relative_to(REPO_ROOT).as_posix() + "/"
    submitted = submitted_files(submission)
    placement, used = Placement(), set()
    for lab_file in lab_files:
        candidates = candidates_for(lab_file, student_prefix, submitted)
        contents = {(submission / c).read_bytes() for c in candidates}
        if not candidates:
            placement.missing.append(lab_file)
        elif len(contents) > 1:
            placement.ambiguous.append((lab_file, candidates))
            used.update(candidates)
        else:
            (student_dir / lab_file).write_bytes(contents.pop())
            placement.placed.append((lab_file, candidates[0]))
            used.update(candidates)
    placement.ignored = [s for s in submitted if s not in used]
    return placement


def restore_skeletons(student_dir, pristine_dir):
    """Puts the lab's skeletons back (a local re-run; Gradescope starts each submission
    afresh). The first run keeps a copy of them in `pristine_dir`."""
    if not pristine_dir.is_dir():
        for path in student_dir.rglob("*"):
            if path.is_file():
                copy = pristine_dir / path.relative_to(student_dir)
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_bytes(path.read_bytes())
    for copy in pristine_dir.rglob("*"):
        if copy.is_file():
            (student_dir / copy.relative_to(pristine_dir)).write_bytes(copy.read_bytes())


# ---------------------------------------------------------------- grading

def lab_folder(number):
    folder = grading.manifest.find_lab_folder(number)
    if folder is None:
        raise SystemExit(f"run_autograder: no lab {number} in {REPO_ROOT / 'labs'}")
    return folder


def setup(number):
    """Configures the release build and builds the lab's targets (setup.sh's last step)."""
    lab = grading.manifest.load_lab(number)
    subprocess.run(["cmake", "--preset", "release"], cwd=REPO_ROOT, check=True)
    failure = grading.build.build(BUILD_DIR, lab)
    if failure is not None:
        print(failure.output, file=sys.stderr)
        return 1
    print(f"run_autograder: lab {number:02d} is built in {BUILD_DIR}; ready to grade")
    return 0


def run_grader(number, results_path):
    """tools/labkit/grade.py on the placed files; returns its output (stdout and stderr)."""
    command = [sys.executable, str(REPO_ROOT / "tools" / "labkit" / "grade.py"), "--lab", str(number),
               "--build-dir", str(BUILD_DIR), "--out", str(results_path),
               *shlex.split(os.environ.get("SERVELAB_GRADE_ARGS", ""))]
    done = subprocess.run(command, cwd=REPO_ROOT, text=True, capture_output=True)
    return f"{done.stdout}{done.stderr}", done.returncode


def read_results(results_path, grader_output):
    """The grader's results.json; one failing entry when it wrote none."""
    try:
        return json.loads(results_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        return error_results(f"the grader wrote no readable results ({error}); its last "
                             f"lines:\n{grading.results.tail(grader_output, 30)}")


def error_results(message):
    return {"score": 0, "output": "the autograder could not grade this submission",
            "tests": [{"name": "autograder error", "score": 0, "max_score": 0,
                       "status": "failed", "output": message, "visibility": "visible"}]}


def grade_submission(number, root):
    """Places the submission, grades it; returns the results (a dict)."""
    student_dir = lab_folder(number) / "student"
    restore_skeletons(student_dir, REPO_ROOT / "build" / "autograder_skeletons" / student_dir.parent.name)
    placement = place_submission(root / "submission", student_dir)
    print(placement.report(), flush=True)
    results_path = root / "results" / "results.json"
    results_path.unlink(missing_ok=True)
    grader_output, _ = run_grader(number, results_path)
    print(grader_output, end="", flush=True)
    results = read_results(results_path, grader_output)
    results["output"] = f"{placement.report()}\n\n{results.get('output', '')}".rstrip()
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=int, required=True, help="the lab this autograder grades")
    parser.add_argument("--setup", action="store_true",
                        help="build the lab's targets once (setup.sh), grade nothing")
    args = parser.parse_args(argv)
    if args.setup:
        return setup(args.lab)
    root = Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    started = time.monotonic()
    try:
        results = grade_submission(args.lab, root)
    except Exception:  # the student must get a results file, whatever broke
        details = traceback.format_exc()
        print(details, file=sys.stderr, end="")
        results = error_results(details)
    results["execution_time"] = int(round(time.monotonic() - started))
    results_path = root / "results" / "results.json"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"run_autograder: wrote {results_path}: {results.get('score')} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
