"""cli.py — the grader's command line: arguments, the stages in order, the exit status.

Part of the autograder (tools/labkit/grade.py, whose docstring is the manual;
docs/labs.md). main() reads the manifest, builds, runs the tests, times the
speed, and always writes results.json, even when the grader itself fails.
"""
import argparse
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from . import REPO_ROOT, NotGraded
from .manifest import (
    DEFAULT_TEST_TIMEOUT_S, TRACK_MANIFESTS, find_lab_folder, load_lab, ManifestError)
from .results import Entry, number, print_scorecard, total_score, write_results
from .gtest import grade_tests
from .timing import RATIO_SE_LIMIT, RATIO_SE_TARGET, grade_throughput
from .build import build, cuda_unavailable


DEFAULT_BUILD_DIR = REPO_ROOT / "build" / "release"
DEFAULT_MODEL = REPO_ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
NOT_GRADED_EXIT = 77         # the track cannot run here (the automake/ctest "skipped" code)


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Grade one servelab lab; writes results.json.")
    parser.add_argument("--lab", type=int, required=True, help="lab number, e.g. 1")
    parser.add_argument("--track", choices=sorted(TRACK_MANIFESTS), default="cpu",
                        help="cpu (manifest.json) or cuda (manifest_cuda.json, needs a GPU)")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--student-tests", type=Path,
                        help="default BUILD/labNN_tests (cuda track: BUILD/labNN_cuda_tests)")
    parser.add_argument("--student-cli", type=Path, help="default BUILD/servelab-labNN")
    parser.add_argument("--reference-cli", type=Path, help="default BUILD/servelab")
    parser.add_argument("--student-program", type=Path,
                        help="a manifest's throughput program, default BUILD/labNN_throughput")
    parser.add_argument("--manifest", type=Path,
                        help="default labs/labNN_<name>/manifest.json (cuda: manifest_cuda.json)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="replaces {model} in bench args")
    parser.add_argument("--out", type=Path,
                        help="default labs/labNN_<name>/results.json (cuda: results_cuda.json)")
    parser.add_argument("--no-build", action="store_true", help="grade the binaries as they are")
    parser.add_argument("--repetitions", type=int,
                        help="undisturbed rounds the speed ratio needs (overrides the manifest)")
    parser.add_argument("--max-rounds", type=int,
                        help="timed rounds at most (default 4 x the repetitions; never fewer "
                             "than the repetitions)")
    parser.add_argument("--target-error", type=float, metavar="PERCENT",
                        help=f"add rounds until the ratio's standard error is at most this "
                             f"percent (default {RATIO_SE_TARGET * 100:g}; at most "
                             f"{RATIO_SE_LIMIT * 100:g}, the most that is graded)")
    parser.add_argument("--program-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for the throughput program (--program-arg=--x=1)")
    parser.add_argument("--skip-throughput", action="store_true",
                        help="grade the tests only (the maximum leaves out the speed points)")
    parser.add_argument("--group", action="append", default=[], metavar="NAME",
                        help="grade only this group (the start of its name; repeatable); "
                             "implies --skip-throughput")
    parser.add_argument("--skip-if-busy", action="store_true",
                        help="exit 77 (ctest's SKIPPED) when the speed could not be timed "
                             "because the machine was busy, and the rest met the thresholds")
    parser.add_argument("--test-timeout", type=float, metavar="S",
                        help=f"one test's limit in seconds: a test running longer is stopped "
                             f"as hung and the others run without it (default: the "
                             f"manifest's test_timeout_s, else {DEFAULT_TEST_TIMEOUT_S})")
    parser.add_argument("--min-score", type=float, help="exit 1 if the score is below this percent")
    parser.add_argument("--max-score", type=float, help="exit 1 if the score is above this percent")
    args = parser.parse_args(argv)
    # Programs run from the repository root: paths given relative to where the
    # grader was started must not change meaning there.
    for name in ("build_dir", "student_tests", "student_cli", "reference_cli", "student_program",
                 "manifest", "model", "out"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    if args.lab < 1:
        parser.error("--lab must be >= 1")
    if args.repetitions is not None and args.repetitions < 1:
        parser.error("--repetitions must be >= 1")
    if args.test_timeout is not None and not args.test_timeout > 0:
        parser.error("--test-timeout must be > 0")
    if args.target_error is not None and not 0 < args.target_error <= RATIO_SE_LIMIT * 100:
        parser.error(f"--target-error must be in (0, {RATIO_SE_LIMIT * 100:g}] percent")
    return args


def select_groups(lab, prefixes):
    """Keeps only the groups named by `prefixes` (each the start of exactly one name)."""
    chosen = []
    for prefix in prefixes:
        matches = [group for group in lab.groups if group.name.startswith(prefix)]
        if len(matches) != 1:
            raise ManifestError(f"--group {prefix!r} must start exactly one group's name; it "
                                f"starts {len(matches)} (groups: "
                                f"{'; '.join(group.name for group in lab.groups)})")
        if matches[0] not in chosen:
            chosen.append(matches[0])
    lab.groups = chosen


@dataclass
class Grade:
    entries: list
    leaderboard: list = field(default_factory=list)
    speed_graded: bool = True  # False: the machine was too busy to time the speed


def grade(lab, args):
    """Builds (unless --no-build) and grades; returns a Grade."""
    build_dir = args.build_dir
    if lab.track == "cuda" and args.student_tests is None:
        reason = cuda_unavailable(build_dir)
        if reason:
            raise NotGraded(f"the CUDA track is unavailable: {reason}")
    if args.group:
        select_groups(lab, args.group)
    if args.skip_throughput or args.group:
        lab.throughput = None
    if args.test_timeout is not None:
        lab.test_timeout_s = args.test_timeout
    if not args.no_build:
        failure = build(build_dir, lab)
        if failure is not None:
            return Grade([failure])
    print(f"grade: running the {lab.test_target} tests", file=sys.stderr)
    result = Grade(grade_tests(args.student_tests or build_dir / lab.test_target, lab))
    if lab.throughput is not None:
        if args.repetitions is not None:
            lab.throughput.repetitions = args.repetitions
        lab.throughput.max_rounds = args.max_rounds
        if args.target_error is not None:
            lab.throughput.target_error = args.target_error / 100
        print(f"grade: measuring {lab.throughput.metric} ({lab.throughput.repetitions}+ rounds, "
              f"{lab.throughput.threads} thread(s))", file=sys.stderr)
        track = "" if lab.track == "cpu" else f" TRACK={lab.track}"
        entry, result.leaderboard, result.speed_graded = grade_throughput(
            lab.throughput, args.student_cli or build_dir / f"servelab-{lab.tag}",
            args.reference_cli or build_dir / "servelab", args.model,
            args.student_program or build_dir / lab.throughput_target, args.program_arg,
            rerun_hint=f"make grade LAB={lab.number}{track}")
        result.entries.append(entry)
    return result


def default_out(args):
    """Where results.json goes when the manifest could not be read."""
    folder = find_lab_folder(args.lab)
    name = "results.json" if args.track == "cpu" else f"results_{args.track}.json"
    return (folder / name) if folder else Path(name)


def threshold_exit_code(args, entries):
    maximum = sum(entry.max_score for entry in entries)
    percent = 100.0 * total_score(entries) / maximum if maximum > 0 else 0.0
    if args.min_score is not None and percent < args.min_score:
        print(f"grade: {percent:.1f}% is below --min-score {number(args.min_score)}%", file=sys.stderr)
        return 1
    if args.max_score is not None and percent > args.max_score:
        print(f"grade: {percent:.1f}% is above --max-score {number(args.max_score)}%", file=sys.stderr)
        return 1
    return 0


def summary_line(args, lab, result, not_graded):
    """The scorecard's last line, `lab NN: S/M points`, also results.json's top-level output."""
    track = "" if args.track == "cpu" else f" {args.track} track"
    if not_graded is not None:
        return f"lab {args.lab:02d}{track}: not graded: {not_graded}"
    entries = result.entries
    maximum = sum(entry.max_score for entry in entries)
    line = f"lab {args.lab:02d}{track}: {number(total_score(entries))}/{number(maximum)} points"
    if not result.speed_graded:
        line += " (speed not graded: machine busy)"
    if lab is not None and lab.hidden_points:
        line += (f"; the course's autograder also runs hidden tests worth "
                 f"{number(lab.hidden_points)} points")
    return line


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()
    lab, result, grader_failed, not_graded = None, Grade([]), False, None
    try:
        lab = load_lab(args.lab, args.manifest, args.track)
        result = grade(lab, args)
    except NotGraded as error:  # no score at all, rather than a zero that looks earned
        not_graded = str(error)
        result = Grade([Entry("not graded", 0, 0, f"not graded on this machine: {not_graded}",
                              passed=False)])
    except ManifestError as error:
        print(f"grade.py: error: {error}", file=sys.stderr)
        result, grader_failed = Grade([Entry("grader error", 0, 0, str(error), passed=False)]), True
    except Exception:  # the grade must still be written, whatever went wrong
        details = traceback.format_exc()
        print(details, file=sys.stderr, end="")
        max_score = lab.max_score if lab else 0
        result = Grade([Entry("grader error", 0, max_score, details, passed=False)])
        grader_failed = True
    entries = result.entries
    out = args.out or (lab.folder / lab.results_name if lab else default_out(args))
    summary = summary_line(args, lab, result, not_graded)
    write_results(out, entries, result.leaderboard, time.monotonic() - started, summary)
    if not_graded is not None:
        print(summary)
        print(f"grade: wrote {out}", file=sys.stderr)
        return NOT_GRADED_EXIT
    print_scorecard(lab.title if lab else f"lab {args.lab:02d}", entries)
    if not result.speed_graded:
        print(f"speed {entries[-1].output.splitlines()[0]}")
    print(summary)
    print(f"grade: wrote {out}", file=sys.stderr)
    if grader_failed:
        return 2
    status = threshold_exit_code(args, entries)
    if status == 0 and args.skip_if_busy and not result.speed_graded:
        print("grade: the speed could not be timed on this busy machine: skipped (77)",
              file=sys.stderr)
        return NOT_GRADED_EXIT
    return status

