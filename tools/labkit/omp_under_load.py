#!/usr/bin/env python3
"""omp_under_load.py — how OpenMP settings take a busy core: the experiment behind the grader's.

Part of the lab framework (docs/labs.md, "Timing on a busy machine"). Runs
`servelab bench` (two of the labs' graded cases: Lab 1's naive decode and
Lab 2's cached decode) under several OpenMP settings, interleaved, on this
machine as it is and under the loads of tools/labkit/grading_noise.py (a nice-19
busy loop on core 1, a nice-19 parallel compile, each in a session of its
own), and prints per case, setting and load the median and range of the
decode rate, and the CPU cores other programs took meanwhile. The settings:

  2 threads            OMP_NUM_THREADS=2, libgomp's default wait policy
  2 threads, active    ... OMP_WAIT_POLICY=active (spin at barriers)
  2 threads, passive   ... OMP_WAIT_POLICY=passive (sleep at barriers)
  2 threads, pinned    ... active, OMP_PROC_BIND=close OMP_PLACES=cores
  1 thread             OMP_NUM_THREADS=1 (what the grader's timed runs use)

  python3 tools/labkit/omp_under_load.py [--rounds 3] [--loads quiet busy-loop compile]

Standard library only; Linux.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(REPO_ROOT / "tools" / "labkit"))
import grading.timing  # noqa: E402  (the load probe)
import grading_noise  # noqa: E402  (the loads)

MODEL = REPO_ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CASES = {
    "lab 1 naive decode": ["--no-kv-cache", "--prompt-tokens", "16", "--gen-tokens", "8"],
    "lab 2 cached decode": ["--kv-layout", "contiguous", "--prompt-tokens", "16",
                            "--gen-tokens", "96"],
}
SETTINGS = {
    "2 threads": {"OMP_NUM_THREADS": "2"},
    "2 threads, active": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "active"},
    "2 threads, passive": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "passive"},
    "2 threads, pinned": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "active",
                          "OMP_PROC_BIND": "close", "OMP_PLACES": "cores"},
    "1 thread": {"OMP_NUM_THREADS": "1"},
}


def one_run(binary, case, setting):
    env = {key: value for key, value in os.environ.items() if not key.startswith("OMP_")}
    env.update(SETTINGS[setting])
    command = [str(binary), "-q", "bench", "--json", "--model", str(MODEL), "--repeats", "1",
               *CASES[case]]
    run = grading.timing.timed_run(command, 600, env, ["decode_tokens_per_s"])
    return run.value, run.other_cores


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", nargs="+", choices=grading_noise.LOADS,
                        default=list(grading_noise.LOADS))
    parser.add_argument("--build-dir", type=pathlib.Path, default=REPO_ROOT / "build" / "release")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    binary = args.build_dir.resolve() / "servelab"
    results = []
    for load in args.loads:
        process = grading_noise.start_load(load, args.build_dir.resolve())
        try:
            for _ in range(args.rounds):
                for case in CASES:
                    for setting in SETTINGS:
                        value, other = one_run(binary, case, setting)
                        results.append({"load": load, "case": case, "setting": setting,
                                        "tokens_per_s": value, "other_cores": other})
                        print(f"omp_under_load: {load}, {case}, {setting}: {value:.2f} tok/s",
                              file=sys.stderr, flush=True)
        finally:
            grading_noise.stop_load(process)
        time.sleep(2)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("| case | setting | load | tokens/s median (min–max) | against quiet | other programs (cores) |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        for setting in SETTINGS:
            quiet = [r["tokens_per_s"] for r in results
                     if r["case"] == case and r["setting"] == setting and r["load"] == "quiet"]
            for load in args.loads:
                mine = [r for r in results
                        if r["case"] == case and r["setting"] == setting and r["load"] == load]
                values = [r["tokens_per_s"] for r in mine]
                others = [r["other_cores"] for r in mine if r["other_cores"] is not None]
                against = (f"{statistics.median(values) / statistics.median(quiet):.2f}x"
                           if quiet else "—")
                other_text = f"{statistics.median(others):.2f}" if others else "—"
                print(f"| {case} | {setting} | {load} | {statistics.median(values):.1f} "
                      f"({min(values):.1f}–{max(values):.1f}) | {against} | {other_text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
