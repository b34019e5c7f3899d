#!/usr/bin/env python3
"""grading_noise.py — does a busy machine change a grade? The reference, graded under load.

Part of the lab framework (docs/labs.md, "Timing on a busy machine"). Grades
each lab's reference solution against itself (what the self-test
grade_labNN_reference_scores_100 does) several times on this machine as it
is, then again under each of two loads started in a session of their own
(as another terminal or a noisy neighbour would run them):

  busy-loop   `nice -n 19 taskset -c 1 sh -c 'while :; do :; done'`: one core
              spinning, at the lowest priority
  compile     a parallel compile at nice 19, `cmake --build -j <cores>` of a
              scratch copy of servelab's engine (build/load), again and again

and prints, per lab and load, the minimum, median and maximum score and
throughput ratio, and how many runs the grader refused to time ("machine
busy"). The goal (issue: noise-proof grading): quiet runs score 100 with a
ratio in 0.9-1.1; loaded runs score 100 or say busy, never in between.

  python3 tools/labkit/grading_noise.py [--labs 1 2 ...] [--runs 5]
         [--loads quiet busy-loop compile] [--build-dir build/release] [--json FILE]

Takes long: each grade is 5 to 60 s (up to 12 timed rounds on a busy
machine). Standard library only; Linux (taskset, setsid).
"""
import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
LOADS = ("quiet", "busy-loop", "compile")


def start_load(name, build_dir):
    """Starts a load in a session of its own; returns the process (None for quiet)."""
    if name == "quiet":
        return None
    if name == "busy-loop":
        command = ["nice", "-n", "19", "taskset", "-c", "1", "sh", "-c", "while :; do :; done"]
    else:
        load_dir = build_dir.parent / "load"
        if not (load_dir / "CMakeCache.txt").is_file():
            subprocess.run(["cmake", "-S", str(REPO_ROOT), "-B", str(load_dir),
                            "-DSERVELAB_CUDA=OFF", "-DCMAKE_BUILD_TYPE=Release"],
                           check=True, capture_output=True)
        jobs = str(os.cpu_count() or 2)
        script = (f"while :; do cmake --build {load_dir} --target clean >/dev/null 2>&1; "
                  f"cmake --build {load_dir} --target servelab_common -j {jobs} >/dev/null 2>&1; done")
        command = ["nice", "-n", "19", "sh", "-c", script]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    time.sleep(3)  # let it get going
    return process


def stop_load(process):
    if process is not None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def grade_reference(lab, build_dir, out):
    """One grade of lab `lab`'s reference against itself; returns a summary dict."""
    command = [sys.executable, str(REPO_ROOT / "tools" / "labkit" / "grade.py"), "--lab", str(lab),
               "--no-build", "--build-dir", str(build_dir),
               "--reference-cli", str(build_dir / "servelab"),
               "--student-cli", str(build_dir / "servelab"),
               "--student-tests", str(build_dir / f"lab{lab:02d}_tests_reference"),
               "--out", str(out)]
    if (build_dir / f"lab{lab:02d}_throughput_reference").is_file():
        command += ["--student-program", str(build_dir / f"lab{lab:02d}_throughput_reference"),
                    "--program-arg=--baseline=step4"]
    started = time.monotonic()
    subprocess.run(command, capture_output=True, text=True)
    results = json.loads(out.read_text(encoding="utf-8"))
    speed = results["tests"][-1]
    ratio = results["leaderboard"][0]["value"] if results["leaderboard"] else None
    rounds = sum(1 for line in speed["output"].splitlines() if line.startswith("  round "))
    return {"score": 100.0 * results["score"] / results["max_score"] if results["max_score"] else 0.0,
            "max_score": results["max_score"], "ratio": ratio,
            "busy": speed["output"].startswith("not graded"), "rounds": rounds,
            "seconds": round(time.monotonic() - started, 1)}


def spread(values, digits):
    if not values:
        return "—"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:.{digits}f} / {mid:.{digits}f} / {high:.{digits}f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", type=int, nargs="+")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--loads", nargs="+", choices=LOADS, default=list(LOADS))
    parser.add_argument("--build-dir", type=pathlib.Path, default=REPO_ROOT / "build" / "release")
    parser.add_argument("--json", type=pathlib.Path, help="write every run's figures here")
    args = parser.parse_args(argv)
    build_dir = args.build_dir.resolve()
    labs = args.labs or sorted(int(p.name[3:5]) for p in (REPO_ROOT / "labs").glob("lab[0-9][0-9]_*")
                               if (p / "manifest.json").is_file())
    scratch = build_dir / "grading_noise"
    scratch.mkdir(parents=True, exist_ok=True)
    runs = []
    for load in args.loads:
        process = start_load(load, build_dir)
        try:
            for lab in labs:
                for attempt in range(args.runs):
                    result = grade_reference(lab, build_dir, scratch / f"lab{lab:02d}.json")
                    result.update(lab=lab, load=load, run=attempt + 1)
                    runs.append(result)
                    print(f"grading_noise: {load}, lab {lab:02d}, run {attempt + 1}: "
                          f"{result['score']:.2f} % of {result['max_score']:g} points, ratio "
                          f"{result['ratio']}, {result['rounds']} rounds"
                          + (", not graded: busy" if result["busy"] else ""),
                          file=sys.stderr, flush=True)
        finally:
            stop_load(process)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
    print("| lab | load | runs | score % min / median / max | ratio min / median / max "
          "| not graded (busy) | rounds median |")
    print("|---|---|---|---|---|---|---|")
    for lab in labs:
        for load in args.loads:
            mine = [r for r in runs if r["lab"] == lab and r["load"] == load]
            graded = [r for r in mine if not r["busy"]]
            scores = [r["score"] for r in graded]
            ratios = [r["ratio"] for r in graded if r["ratio"] is not None]
            print(f"| {lab} | {load} | {len(mine)} | {spread(scores, 2)} | {spread(ratios, 3)} | "
                  f"{len(mine) - len(graded)} | {statistics.median(r['rounds'] for r in mine):g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
