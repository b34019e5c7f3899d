#!/usr/bin/env python3
"""make_autograder.py — the course's Gradescope autograder for one lab: autograder_labNN.zip.

Part of the lab framework (docs/teaching.md, "Grading on Gradescope"); the
instructor's tree only. The zip, unpacked by Gradescope into /autograder/source/:

  setup.sh        installs what the machine needs and builds the lab (run once)
  run_autograder  grades one submission (tools/labkit/autograder/run_autograder.py)
  LAB             the lab's number
  servelab/       the student release of this tree (tools/labkit/student_release.py)
                  with the hidden tests and the whole manifests kept: no
                  solution text (the leak check runs on it), the reference's
                  exercise files prebuilt. Students never see this zip.

The same tree and build give the same bytes: files in sorted order, every
time stamp 1980-01-01, modes 0755 for scripts (a #! line) and 0644 for the rest.

Usage: make_autograder.py --lab N [--out autograder_labNN.zip] [--build-dir build/release]
                          [--no-build]
Exit status: 0, 1 when the release's leak check fails, 2 on a usage error.
"""
import argparse
import importlib.util
import pathlib
import stat
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(ROOT / "tools" / "labkit"))
import grading.manifest  # noqa: E402  (lab folders)
import student_release  # noqa: E402

SCRIPTS = ("setup.sh", "run_autograder")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build time in the bytes


def stage(number, staging, build_dir, build):
    """Writes the zip's contents into `staging`; returns the release cut's exit status."""
    status = student_release.cut(ROOT, staging / "servelab", build_dir, prebuilt=True,
                                 build=build, with_hidden=True)
    if status != 0:
        return status
    for script in SCRIPTS:
        (staging / script).write_bytes((HERE / script).read_bytes())
    (staging / "LAB").write_text(f"{number}\n")
    return 0


def is_program(path):
    """Gradescope's two scripts, and any script with a #! line, run as programs."""
    if path.name in SCRIPTS:
        return True
    with path.open("rb") as file:
        return file.read(2) == b"#!"


def write_zip(staging, out):
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(staging).as_posix(), date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o755 if is_program(path) else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info, path.read_bytes())
    return len(files)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", type=int, required=True)
    parser.add_argument("--out", type=pathlib.Path, help="default autograder_labNN.zip")
    parser.add_argument("--build-dir", type=pathlib.Path, default=ROOT / "build" / "release",
                        help="the instructor's configured release build (for the prebuilt objects)")
    parser.add_argument("--no-build", action="store_true",
                        help="archive the reference objects as they are built")
    args = parser.parse_args(argv)
    if grading.manifest.find_lab_folder(args.lab) is None:
        parser.error(f"there is no lab {args.lab} (labs/lab{args.lab:02d}_<name>/)")
    out = (args.out or pathlib.Path(f"autograder_lab{args.lab:02d}.zip")).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="servelab-autograder-") as scratch:
        staging = pathlib.Path(scratch)
        status = stage(args.lab, staging, args.build_dir.resolve(), not args.no_build)
        if status != 0:
            return status
        count = write_zip(staging, out)
    print(f"make_autograder: wrote {out}: {count} files, {out.stat().st_size / 2**20:.1f} MiB; "
          f"upload it as lab {args.lab}'s autograder (docs/teaching.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
