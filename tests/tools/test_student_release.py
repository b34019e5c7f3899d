#!/usr/bin/env python3
"""test_student_release.py — the student release (tools/labkit/student_release.py) holds no solution.

Part of the lab framework (docs/teaching.md). Two runs:

  test_student_release.py --build-dir build/release
      make test's part (no build): cuts a release from this tree with the
      build's reference objects, twice, and checks
        - the two cuts are the same bytes;
        - no file of the instructor's is in it; README.md is the students';
          RELEASE names this commit;
        - every exercise file is byte for byte its skeleton in
          labs/labNN_*/student/, and the archive holds one object per file,
          with no debug sections;
        - three distinctive solution lines of every lab occur nowhere in it
          (a plain substring search, independent of the leak check's rules);
        - the hidden tests are left out: no tests/hidden/ file, no hidden
          group or source in a manifest (whose "hidden_points" add up what
          was left out), no hidden suite's name anywhere, and a pasted line
          of a hidden test fails the leak check;
        - the leak check passes on it, and fails, naming the file and the
          region, once one solution line is pasted into a handout;
        - CMake configures it, taking the prebuilt objects.
  test_student_release.py --build-dir build/release --proof
      the slow proof (label "slow"): that release built from scratch in a
      fresh folder, as a student gets it: `make run` chats, the grader's unit
      tests pass there (none may need an instructor-only file), every lab's
      untouched skeleton grades 0 saying "not implemented", and with the
      instructor's solution files copied into its student/ folder it grades
      100 on the tests (the timed case may say "not graded: busy").
"""
import argparse
import filecmp
import importlib.util
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("student_release",
                                               REPO / "tools" / "labkit" / "student_release.py")
student_release = importlib.util.module_from_spec(_spec)
sys.modules["student_release"] = student_release
_spec.loader.exec_module(student_release)
make_skeletons = student_release.make_skeletons


def fail(message):
    sys.exit(f"FAIL {message}")


def cut(out, build_dir, build=False):
    command = [sys.executable, str(REPO / "tools" / "labkit" / "student_release.py"), "--out", str(out),
               "--build-dir", str(build_dir)]
    if not build:
        command.append("--no-build")
    done = subprocess.run(command, text=True, capture_output=True)
    if done.returncode != 0:
        fail(f"the release was not cut (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def release_files(release):
    return sorted(p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file())


def check_same_bytes(first, second):
    files = release_files(first)
    if files != release_files(second):
        fail("two cuts of the same tree hold different files")
    differing = [f for f in files if not filecmp.cmp(first / f, second / f, shallow=False)]
    if differing:
        fail(f"two cuts of the same tree differ in {differing[:5]}")
    print(f"  same bytes twice: {len(files)} files: ok")


def check_contents(release):
    files = release_files(release)
    leaked = [f for f in files if student_release.instructor_only(f)]
    if leaked:
        fail(f"instructor-only files in the release: {leaked[:5]}")
    if (release / "README.md").read_bytes() != (REPO / student_release.STUDENT_README).read_bytes():
        fail("README.md is not the students' (tools/labkit/release/README.md)")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, text=True,
                            capture_output=True).stdout.strip()
    if commit not in (release / "RELEASE").read_text():
        fail(f"RELEASE does not name the source commit {commit}")
    skeletons, _ = make_skeletons.generate(REPO)
    for student_path, content in skeletons.items():
        source_path = "/".join(student_path.parts[3:])
        if (release / source_path).read_bytes() != content:
            fail(f"{source_path} in the release is not its skeleton ({student_path})")
        if (release / student_path).read_bytes() != content:
            fail(f"{student_path} in the release is not the generated skeleton")
    print(f"  no instructor file; README.md, RELEASE; {len(skeletons)} exercise files are "
          "their skeletons: ok")


def check_archive(release, build_dir):
    """One member per reference exercise object the build lists (C++, and CUDA where
    nvcc compiled them), named by its exercise id, with no debug sections."""
    archive = release / student_release.PREBUILT_ARCHIVE
    members = subprocess.run(["ar", "t", str(archive)], text=True, capture_output=True,
                             check=True).stdout.split()
    expected = sorted(f"{exercise_id}.o" for exercise_id, _ in
                      student_release.solution_objects(build_dir))
    cpu_files = [p for p in make_skeletons.generate(REPO)[0] if p.suffix == ".cpp"]
    if sorted(members) != expected or len(members) < len(cpu_files):
        fail(f"the archive holds {sorted(members)}; expected {expected}, at least one object "
             f"for each of the {len(cpu_files)} C++ exercise files")
    sections = subprocess.run(["objdump", "-h", str(archive)], text=True, capture_output=True,
                              check=True).stdout
    if ".debug_" in sections:
        fail("the prebuilt archive keeps debug sections (source lines and names)")
    print(f"  the archive: {len(members)} objects, no debug sections: ok")


def check_distinctive_lines_absent(release):
    """Three long solution lines of each lab, searched for as plain text everywhere."""
    by_lab = {}
    for line, label in sorted(student_release.distinctive_lines(REPO).items(),
                              key=lambda item: -len(item[0])):
        if not isinstance(label, student_release.RegionLabel):
            continue  # a hidden test's line: check_hidden_tests_left_out
        by_lab.setdefault(label.lab, [])
        if len(by_lab[label.lab]) < 3:
            by_lab[label.lab].append(line)
    texts = {}
    for name in release_files(release):
        lines = student_release.text_lines(release / name)
        if lines is not None:
            texts[name] = "\n".join(student_release.normalise(line) for line in lines)
    for lab, lines in sorted(by_lab.items()):
        for line in lines:
            found = [name for name, text in texts.items() if line in text]
            if found:
                fail(f"lab{lab}'s solution line {line!r} is in the release: {found}")
    print(f"  3 solution lines of each of {len(by_lab)} labs are nowhere in it: ok")


def hidden_suites():
    """The suite names of tests/hidden/'s tests."""
    names = set()
    for path in sorted((REPO / "tests" / "hidden").glob("*.cpp")):
        names.update(re.findall(r"^\s*TEST(?:_F)?\(\s*(\w+)\s*,", path.read_text(), re.MULTILINE))
    return names


def check_hidden_tests_left_out(release):
    files = release_files(release)
    if any(f.startswith("tests/hidden/") for f in files):
        fail("tests/hidden/ is in the release")
    for manifest in sorted(REPO.glob("labs/lab[0-9][0-9]_*/manifest*.json")):
        where = manifest.relative_to(REPO).as_posix()
        instructors = json.loads(manifest.read_text())
        students = json.loads((release / where).read_text())
        hidden = [g for g in instructors["groups"] if g.get("visibility", "visible") != "visible"]
        if not hidden:
            continue
        if [g["name"] for g in students["groups"]] != [g["name"] for g in instructors["groups"]
                                                       if g not in hidden]:
            fail(f"{where} in the release does not keep exactly the visible groups")
        if any(s.startswith("tests/hidden/") for s in students["test_sources"]):
            fail(f"{where} in the release still names a hidden test source")
        if students.get("hidden_points") != sum(g["points"] for g in hidden):
            fail(f"{where}: hidden_points {students.get('hidden_points')} is not the "
                 f"{sum(g['points'] for g in hidden)} points left out")
    suites = hidden_suites()
    texts = {name: (release / name).read_bytes() for name in files}
    for suite in sorted(suites):
        found = [name for name, data in texts.items() if suite.encode() in data]
        if found:
            fail(f"the hidden suite {suite} is named in the release: {found[:3]}")
    distinctive = student_release.distinctive_lines(REPO)
    hidden_lines = sorted(line for line, label in distinctive.items()
                          if isinstance(label, student_release.HiddenTestLabel))
    if not hidden_lines:
        fail("the leak check knows no line of the hidden tests")
    line = max(hidden_lines, key=len)
    paste_and_check(release, line, distinctive[line])
    print(f"  hidden tests left out ({len(suites)} suites), manifests without them: ok")


def paste_and_check(release, line, label):
    """Pastes `line` into a handout: the leak check must fail, naming the file and `label`."""
    handout = release / "labs" / "README.md"
    original = handout.read_text()
    handout.write_text(original + f"\n```cpp\n    {line}\n```\n")
    try:
        done = subprocess.run([sys.executable, str(REPO / "tools" / "labkit" / "student_release.py"),
                               "--leak-check", str(release)], text=True, capture_output=True)
    finally:
        handout.write_text(original)
    if done.returncode == 0:
        fail(f"the leak check passed a release with {label}'s line {line!r} pasted into "
             "labs/README.md")
    if "labs/README.md" not in done.stdout or str(label) not in done.stdout:
        fail(f"the leak check's report does not name the file and the region: {done.stdout!r}")
    print(f"  a pasted line fails the leak check, naming labs/README.md and {label}: ok")


def check_pasted_line_fails(release):
    distinctive = student_release.distinctive_lines(REPO)
    line, label = sorted((line, label) for line, label in distinctive.items()
                         if isinstance(label, student_release.RegionLabel))[0]
    paste_and_check(release, line, label)


def check_configures(release):
    build = release / "build" / "configured"
    done = subprocess.run(["cmake", "-S", str(release), "-B", str(build), "-G", "Ninja"],
                          text=True, capture_output=True)
    if done.returncode != 0:
        fail(f"the release does not configure:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    if "the reference exercise files are prebuilt" not in done.stdout:
        fail("the release configured without its prebuilt reference objects")
    shutil.rmtree(build)
    print("  CMake configures it on the prebuilt objects: ok")


# ---------------------------------------------------------------- the slow proof


def run_in(release, command, timeout):
    done = subprocess.run(command, cwd=release, text=True, capture_output=True, timeout=timeout)
    if done.returncode != 0:
        fail(f"{' '.join(command)} failed in the release (exit {done.returncode}):\n"
             f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def lab_folders(release):
    return sorted(p for p in (release / "labs").iterdir() if (p / "manifest.json").is_file())


def grade(release, lab_dir):
    number = int(lab_dir.name[3:5])
    run_in(release, ["make", "grade", f"LAB={number}"], timeout=1800)
    return json.loads((lab_dir / "results.json").read_text())


def check_skeleton_grades_zero(release):
    for lab_dir in lab_folders(release):
        results = grade(release, lab_dir)
        if results["score"] != 0:
            fail(f"{lab_dir.name}'s untouched skeleton scored {results['score']}")
        silent = [t["name"] for t in results["tests"] if "not implemented" not in t["output"]]
        if silent:
            fail(f"{lab_dir.name}: groups that do not say 'not implemented': {silent}")
        print(f"  {lab_dir.name}: the skeleton scores 0, saying 'not implemented': ok")


def check_solutions_grade_full(release):
    skeletons, _ = make_skeletons.generate(REPO)
    for student_path in skeletons:
        shutil.copyfile(REPO / "/".join(student_path.parts[3:]), release / student_path)
    for lab_dir in lab_folders(release):
        results = grade(release, lab_dir)
        for test in results["tests"]:
            busy = "not graded" in test["output"] and "busy" in test["output"]
            if test["score"] != test["max_score"] and not busy:
                fail(f"{lab_dir.name} with the solutions: {test['name']!r} scored "
                     f"{test['score']}/{test['max_score']}: {test['output'][:500]}")
        print(f"  {lab_dir.name}: the solutions score {results['score']}/"
              f"{results['max_score']}: ok")


def proof(build_dir):
    with tempfile.TemporaryDirectory(prefix="servelab-release-") as scratch:
        release = pathlib.Path(scratch) / "course"
        cut(release, build_dir, build=True)
        # What `make run` would download or install again: the model and the Python tools.
        (release / "data" / "models").symlink_to(REPO / "data" / "models")
        (release / ".venv").symlink_to(REPO / ".venv")
        env_note = run_in(release, ["make", "run", "QUESTION=Say hello."], timeout=3600)
        if "assistant" not in env_note.lower() and len(env_note.strip()) < 10:
            fail(f"make run gave no answer: {env_note[-1000:]}")
        print("  make run chats on the release: ok")
        # The release's own tool tests, without the instructor's files they may reach for.
        run_in(release, [sys.executable, "tests/tools/test_grade.py"], timeout=600)
        print("  the grader's unit tests pass in the release: ok")
        check_skeleton_grades_zero(release)
        check_solutions_grade_full(release)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", type=pathlib.Path, required=True)
    parser.add_argument("--proof", action="store_true")
    args = parser.parse_args()
    if args.proof:
        proof(args.build_dir.resolve())
        print("PASS")
        return
    with tempfile.TemporaryDirectory(prefix="servelab-release-") as scratch:
        first, second = pathlib.Path(scratch) / "a", pathlib.Path(scratch) / "b"
        print(cut(first, args.build_dir).strip())
        cut(second, args.build_dir)
        check_same_bytes(first, second)
        check_contents(first)
        check_archive(first, args.build_dir.resolve())
        check_distinctive_lines_absent(first)
        check_pasted_line_fails(first)
        check_hidden_tests_left_out(first)
        check_configures(first)
    print("PASS")


if __name__ == "__main__":
    main()
