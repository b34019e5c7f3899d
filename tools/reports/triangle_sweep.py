#!/usr/bin/env python3
"""triangle_sweep.py — chapter 11.8's latency–throughput–cost triangle, measured on one engine

Part of chapter 11.8 (the triangle that closes the chapter: low latency from
speculation, fusion and distillation; high throughput from continuous
batching, paged KV and quantization; low cost from quantization, KV
compression and batching). It replays one trace through `servelab bench
throughput` over a grid of engine settings and records, for each point,

  throughput  output tokens/s;
  latency     TTFT and TPOT, p50 and p99 (ms);
  cost        core-seconds per 1,000 output tokens: the child's CPU time
              (user + sys, from os.wait4's rusage) / output tokens × 1000,
              model loading included; and its peak memory (ru_maxrss).

The grid varies one knob at a time from the baseline, the defaults a user
gets (`--max-num-seqs 64 --max-num-batched-tokens 512`, no speculation, the
shipped Q4_1 weights):

  max_num_seqs   requests running at once: 1, 2, 4, 8, 16, 32 (64 is the baseline);
  token_budget   --max-num-batched-tokens, the chunk a prefill is cut into: 64 … 1024;
  speculation    --speculate K with the n-gram and early-exit drafters, K = 2, 4, 8;
  weights        Q4_0 and Q8_0 files written by `servelab quantize --method rtn`
                 from the shipped Q4_1 (into data/models/, reused when present);
  seqs x spec    speculation (n-gram, K = 4) at 1 and 8 requests at once: what
                 speculation buys when the batch is small against when it is full.

The KV-dtype knob is measured apart: the paged pool that `bench throughput`
and the server use holds f32 only (CacheOptions::paged refuses int8), so
f32 against int8 is `servelab bench --kv-layout contiguous --kv-dtype D`,
one sequence (prefill, then decode), with `servelab info --kv --json` for
the bytes per token; how many full-context sequences a fixed KV budget holds
at each dtype is computed from those bytes, not measured.

Points run interleaved: every repeat runs every point once, each repeat in a
rotated order, so a slow drift of a shared machine spreads over all settings;
each figure is the median over repeats. Results go to
data/results/triangle_sweep.json (what notebooks/triangle.ipynb and
docs/triangle.md show), the tables to stdout, and with --plot the Pareto
frontier to an image.

    .venv/bin/python tools/reports/triangle_sweep.py --wait-quiet 1200 --plot docs/img/triangle_frontier.png
                                                   # full sweep: 52 min on 2 cores, 2026-12-05
    .venv/bin/python tools/reports/triangle_sweep.py --quick --output /tmp/t.json  # tiny model, seconds
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_OUT = ROOT / "data/results/triangle_sweep.json"

# How much a ratio must move to count as moving a corner: this VM's run-to-run noise is
# ±10% (docs/perf.md), so smaller moves are reported as "no clear change".
NOISE = 0.10


# --- running one point ---------------------------------------------------------------------------

def run_measured(cmd: list[str], threads: int) -> tuple[dict, dict]:
    """Runs `cmd` with OMP_NUM_THREADS=threads; returns its JSON stdout and its rusage figures."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not the sum of all
        wall_s = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"triangle_sweep: {shlex.join(cmd)} failed ({proc.returncode}):\n"
                             f"{err.read().decode(errors='replace')[-2000:]}")
        out.seek(0)
        report = json.loads(out.read())
    rusage = {"core_s": usage.ru_utime + usage.ru_stime, "wall_s": wall_s,
              "peak_mb": usage.ru_maxrss / 1024}  # ru_maxrss is in KiB on Linux
    return report, rusage


def throughput_figures(report: dict, rusage: dict) -> dict:
    s = report["summary"]
    return {"output_tokens_per_s": s["output_tokens_per_s"],
            "ttft_p50_ms": s["ttft_ms"]["median"], "ttft_p99_ms": s["ttft_ms"]["p99"],
            "tpot_p50_ms": s["tpot_ms"]["median"], "tpot_p99_ms": s["tpot_ms"]["p99"],
            "core_s_per_1k_tokens": 1000 * rusage["core_s"] / max(1, s["output_tokens"]),
            "peak_mb": rusage["peak_mb"], "core_s": rusage["core_s"], "wall_s": rusage["wall_s"],
            "output_tokens": s["output_tokens"], "duration_s": s["duration_s"],
            "steps": s["steps"], "tokens_computed": s["tokens_computed"],
            "preemptions": s["preemptions"]}


def bench_figures(report: dict, rusage: dict) -> dict:
    """`servelab bench` (one sequence): TTFT is the prefill, TPOT a decode step."""
    gen = report["gen_tokens"]
    return {"output_tokens_per_s": report["decode_tokens_per_s"],
            "prefill_tokens_per_s": report["prefill_tokens_per_s"],
            "ttft_p50_ms": report["prefill_ms"],
            "tpot_p50_ms": 1000 / report["decode_tokens_per_s"],
            "core_s_per_1k_tokens": 1000 * rusage["core_s"] / gen,
            "peak_mb": rusage["peak_mb"], "core_s": rusage["core_s"], "wall_s": rusage["wall_s"],
            "output_tokens": gen}


# --- the grid ------------------------------------------------------------------------------------

def point(name, axis, value, cmd, kind="throughput") -> dict:
    return {"name": name, "axis": axis, "value": value, "kind": kind, "cmd": cmd}


def make_grid(args, models: dict) -> list[dict]:
    """Every point's command. `models` maps a weight format to its file (Q4_1: the source)."""
    def tp(model, *extra):
        return [str(args.servelab), "bench", "throughput", "--json", "--no-progress",
                "--model", str(model), "--trace", str(args.trace), "--limit", str(args.limit),
                "--max-output", str(args.max_output), "--request-rate", str(args.request_rate),
                "--seed", "0", *extra]

    def kv(dtype):
        return [str(args.servelab), "bench", "--json", "--model", str(args.model),
                "--kv-layout", "contiguous", "--kv-dtype", dtype,
                "--prompt-tokens", str(args.kv_prompt), "--gen-tokens", str(args.kv_gen),
                "--repeats", "1"]

    grid = [point("baseline", "baseline", "defaults", tp(args.model))]
    for n in args.seqs:
        grid.append(point(f"seqs={n}", "max_num_seqs", n, tp(args.model, "--max-num-seqs", str(n))))
    for b in args.budgets:
        grid.append(point(f"budget={b}", "token_budget", b,
                          tp(args.model, "--max-num-batched-tokens", str(b))))
    for drafter in args.drafters:
        for k in args.spec_k:
            grid.append(point(f"{drafter} K={k}", "speculation", f"{drafter} K={k}",
                              tp(args.model, "--speculate", str(k), "--drafter", drafter)))
    for fmt, path in models.items():
        if fmt != "Q4_1":
            grid.append(point(f"weights {fmt}", "weights", fmt, tp(path)))
    for n in args.cross_seqs:
        grid.append(point(f"seqs={n} ngram K=4", "seqs x spec", f"seqs={n}, ngram K=4",
                          tp(args.model, "--max-num-seqs", str(n), "--speculate", "4",
                             "--drafter", "ngram")))
    for dtype in ("f32", "int8"):
        grid.append(point(f"kv {dtype}", "kv_dtype", dtype, kv(dtype), kind="bench"))
    return grid


def weight_files(args, notes: list[str]) -> dict:
    """The shipped file and RTN requantizations of it, made once into --model-dir."""
    models = {"Q4_1": args.model}
    for fmt in args.weight_formats:
        out = args.model_dir / f"{args.model.stem}.rtn-{fmt}.gguf"
        if not out.exists() or out.stat().st_mtime < args.model.stat().st_mtime:
            cmd = [str(args.servelab), "-q", "quantize", "-m", str(args.model), "-o", str(out),
                   "--method", "rtn", "--type", fmt.lower(), "--json"]
            print(f"triangle_sweep: {shlex.join(cmd)}", file=sys.stderr, flush=True)
            result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if result.returncode != 0:
                notes.append(f"weights {fmt}: skipped, `servelab quantize` could not make it: "
                             f"{result.stderr.strip()[-300:]}")
                continue
        models[fmt] = out
    return models


def kv_capacity(args, pool_blocks: int, block_size: int = 16) -> dict:
    """Bytes per token of each KV dtype (`info --kv --json`) and how many full-context sequences
    the baseline's paged pool (its bytes, at f32) would hold at each: computed, not measured."""
    report = json.loads(subprocess.run(
        [str(args.servelab), "info", "--kv", "--json", "-m", str(args.model)],
        check=True, capture_output=True, text=True, cwd=ROOT).stdout)
    footprints = {f["dtype"]: f for f in report["configs"][0]["footprints"]}
    context = report["configs"][0]["context_length"]
    budget = pool_blocks * block_size * footprints["f32"]["bytes_per_token"]
    out = {"budget_bytes": budget, "budget": f"{budget / 2**30:.2f} GiB (the serving pool)",
           "context_length": context,
           "how": "computed: budget // (bytes_per_token x context_length); not measured"}
    for dtype in ("f32", "int8"):
        bpt = footprints[dtype]["bytes_per_token"]
        out[dtype] = {"bytes_per_token": bpt, "full_context_sequences": budget // (bpt * context)}
    return out


# --- medians, frontier, deltas -------------------------------------------------------------------

def medians(runs: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def pareto(points: list[dict], latency_key: str) -> list[str]:
    """Names of the points no other point beats on both throughput and `latency_key`,
    in order of throughput (the frontier a plot connects)."""
    front = []
    for p in points:
        m = p["median"]
        dominated = any(
            q is not p and q["median"]["output_tokens_per_s"] >= m["output_tokens_per_s"]
            and q["median"][latency_key] <= m[latency_key]
            and (q["median"]["output_tokens_per_s"] > m["output_tokens_per_s"]
                 or q["median"][latency_key] < m[latency_key]) for q in points)
        if not dominated:
            front.append(p)
    return [p["name"] for p in sorted(front, key=lambda p: p["median"]["output_tokens_per_s"])]


def corners(tput_x: float, ttft_x: float, tpot_x: float, cost_x: float) -> str:
    """Which corners of the triangle a setting moved toward (+) and away from (−)."""
    moved = []
    for corner, better, worse in (
            ("throughput", tput_x > 1 + NOISE, tput_x < 1 - NOISE),
            ("TPOT", tpot_x < 1 - NOISE, tpot_x > 1 + NOISE),
            ("TTFT", ttft_x < 1 - NOISE, ttft_x > 1 + NOISE),
            ("cost", cost_x < 1 - NOISE, cost_x > 1 + NOISE)):
        if better:
            moved.append(f"+{corner}")
        elif worse:
            moved.append(f"−{corner}")
    return ", ".join(moved) or "no clear change"


def delta(p: dict, base: dict) -> dict:
    m, b = p["median"], base["median"]
    d = {"name": p["name"], "axis": p["axis"], "against": base["name"],
         "throughput_x": m["output_tokens_per_s"] / b["output_tokens_per_s"],
         "ttft_p50_x": m["ttft_p50_ms"] / b["ttft_p50_ms"],
         "tpot_p50_x": m["tpot_p50_ms"] / b["tpot_p50_ms"],
         "cost_x": m["core_s_per_1k_tokens"] / b["core_s_per_1k_tokens"],
         "peak_mb_delta": m["peak_mb"] - b["peak_mb"]}
    d["corners"] = corners(d["throughput_x"], d["ttft_p50_x"], d["tpot_p50_x"], d["cost_x"])
    return d


def deltas(points: list[dict]) -> list[dict]:
    """Each point against its baseline: the serving baseline, or f32 for the KV-dtype pair."""
    by_name = {p["name"]: p for p in points}
    out = []
    for p in points:
        if p["name"] in ("baseline", "kv f32"):
            continue
        out.append(delta(p, by_name["kv f32" if p["kind"] == "bench" else "baseline"]))
    return out


# --- tables and the plot -------------------------------------------------------------------------

def points_table(result: dict) -> str:
    lines = ["| setting | knob | output tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms "
             "| core-s / 1k tok | peak MB | frontier |", "|---|---|---|---|---|---|---|---|"]
    front = set(result["frontier"]["tpot_p50_ms"]) | set(result["frontier"]["ttft_p50_ms"])
    for p in result["points"]:
        if p["kind"] != "throughput":
            continue
        m = p["median"]
        on = [k for k, key in (("TPOT", "tpot_p50_ms"), ("TTFT", "ttft_p50_ms"))
              if p["name"] in result["frontier"][key]]
        lines.append(f"| {p['name']} | {p['axis']} | {m['output_tokens_per_s']:.1f} | "
                     f"{m['ttft_p50_ms']:.0f} / {m['ttft_p99_ms']:.0f} | "
                     f"{m['tpot_p50_ms']:.1f} / {m['tpot_p99_ms']:.1f} | "
                     f"{m['core_s_per_1k_tokens']:.1f} | {m['peak_mb']:.0f} | "
                     f"{'+'.join(on) if p['name'] in front else ''} |")
    return "\n".join(lines)


def kv_table(result: dict) -> str:
    cap = result["kv_capacity"]
    lines = ["| KV dtype (contiguous, batch 1) | bytes / token | prefill tok/s (TTFT ms) "
             "| decode tok/s (TPOT ms) | core-s / 1k tok | peak MB "
             f"| full-context sequences in {cap['budget']} (computed) |",
             "|---|---|---|---|---|---|---|"]
    for p in result["points"]:
        if p["kind"] != "bench":
            continue
        m, c = p["median"], cap[p["value"]]
        lines.append(f"| {p['value']} | {c['bytes_per_token']:,} | {m['prefill_tokens_per_s']:.0f} "
                     f"({m['ttft_p50_ms']:.0f}) | {m['output_tokens_per_s']:.1f} "
                     f"({m['tpot_p50_ms']:.1f}) | {m['core_s_per_1k_tokens']:.1f} | "
                     f"{m['peak_mb']:.0f} | {c['full_context_sequences']} |")
    return "\n".join(lines)


def deltas_table(result: dict) -> str:
    lines = ["| knob | setting | throughput × | TTFT p50 × | TPOT p50 × | core-s / 1k × "
             "| peak MB Δ | corners moved (±10%) |", "|---|---|---|---|---|---|---|---|"]
    for d in result["deltas"]:
        lines.append(f"| {d['axis']} | {d['name']} | {d['throughput_x']:.2f} | "
                     f"{d['ttft_p50_x']:.2f} | {d['tpot_p50_x']:.2f} | {d['cost_x']:.2f} | "
                     f"{d['peak_mb_delta']:+.0f} | {d['corners']} |")
    return "\n".join(lines)


AXIS_COLOURS = {"baseline": "black", "max_num_seqs": "tab:blue", "token_budget": "tab:green",
                "speculation": "tab:red", "weights": "tab:purple", "seqs x spec": "tab:orange"}


def plot_frontier(result: dict, axes=None):
    """Latency (TPOT p50, TTFT p50) against output tokens/s, one panel each; points coloured by
    cost, edged by knob, labelled; the Pareto frontier connected. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter
    points = [p for p in result["points"] if p["kind"] == "throughput"]
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(15, 6), layout="constrained")
    fig = axes[0].figure
    costs = [p["median"]["core_s_per_1k_tokens"] for p in points]
    for ax, key, label in ((axes[0], "tpot_p50_ms", "TPOT p50 (ms)"),
                           (axes[1], "ttft_p50_ms", "TTFT p50 (ms)")):
        xs = [p["median"]["output_tokens_per_s"] for p in points]
        ys = [p["median"][key] for p in points]
        sc = ax.scatter(xs, ys, c=costs, cmap="viridis_r", s=70, zorder=3,
                        edgecolors=[AXIS_COLOURS.get(p["axis"], "gray") for p in points],
                        linewidths=1.5)
        for p, x, y in zip(points, xs, ys):
            ax.annotate(p["name"], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
        by_name = {p["name"]: p for p in points}
        front = [by_name[n] for n in result["frontier"][key]]
        ax.plot([p["median"]["output_tokens_per_s"] for p in front],
                [p["median"][key] for p in front], "-", color="gray", zorder=2,
                label="Pareto frontier")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xlabel("output tokens/s (higher is better)")
        ax.set_ylabel(f"{label}, log scale (lower is better)")
        ax.legend(fontsize=8, loc="best")
    fig.colorbar(sc, ax=list(axes), label="core-seconds per 1k output tokens (cost)")
    h = result["header"]
    fig.suptitle(f"{h['model_name']} on {h['trace_name']}: {h['machine']}, {h['threads']} threads, "
                 f"{h['date']}", fontsize=10)
    return fig


# --- main ----------------------------------------------------------------------------------------

def load_average() -> float:
    return os.getloadavg()[0]


def wait_quiet(seconds: float) -> bool:
    """Polls every 30 s until no compiler runs and the 1-minute load is below 1.5."""
    deadline = time.time() + seconds
    while True:
        compilers = subprocess.run(["pgrep", "-c", "cc1plus"], capture_output=True, text=True)
        busy = int(compilers.stdout.strip() or 0)
        if busy == 0 and load_average() < 1.5:
            return True
        if time.time() >= deadline:
            return False
        print(f"triangle_sweep: waiting for a quiet machine ({busy} compilers, load "
              f"{load_average():.2f})", file=sys.stderr, flush=True)
        time.sleep(30)


def git_describe() -> str:
    """The commit the binary was built from, and whether the tree had changes."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return head + (" with uncommitted changes" if dirty else "")


def cpu_name() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def quick_setup(args, tmp: pathlib.Path) -> None:
    """--quick: a tiny random Q4_1 model, four requests, a handful of points, one repeat."""
    tiny = tmp / "tiny.gguf"
    subprocess.run([str(args.servelab), "-q", "make-tiny-model", "-o", str(tiny), "--seed", "3",
                    "--context", "2048", "--weight-type", "q4_1"], check=True, cwd=ROOT)
    args.model, args.model_dir = tiny, tmp
    args.limit, args.max_output, args.request_rate, args.repeats = 4, 8, 0, 1
    args.seqs, args.budgets, args.spec_k, args.drafters = [1], [64], [4], ["ngram"]
    args.cross_seqs, args.weight_formats = [], ["Q8_0"]
    args.kv_prompt, args.kv_gen = 16, 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", type=pathlib.Path, default=ROOT / "build/release/servelab")
    parser.add_argument("--model", type=pathlib.Path, default=DEFAULT_MODEL)
    parser.add_argument("--model-dir", type=pathlib.Path, default=ROOT / "data/models",
                        help="where the requantized files go (gitignored)")
    parser.add_argument("--output", type=pathlib.Path, default=DEFAULT_OUT)
    parser.add_argument("--plot", type=pathlib.Path, help="also save the frontier plot here")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="a tiny random model and a handful of points (CI, the notebook)")
    parser.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                        help="first wait up to this long for no compiler and load below 1.5")
    parser.add_argument("--trace", type=pathlib.Path,
                        default=ROOT / "data/traces/sharegpt_like.jsonl")
    parser.add_argument("--limit", type=int, default=32, help="first N requests of the trace")
    parser.add_argument("--max-output", type=int, default=64, help="cap on each request's output")
    parser.add_argument("--request-rate", type=float, default=2.0, help="Poisson requests/s")
    parser.add_argument("--seqs", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--budgets", nargs="*", type=int, default=[64, 128, 256, 1024])
    parser.add_argument("--drafters", nargs="*", default=["ngram", "early-exit"])
    parser.add_argument("--spec-k", nargs="*", type=int, default=[2, 4, 8])
    parser.add_argument("--cross-seqs", nargs="*", type=int, default=[1, 8],
                        help="batch sizes crossed with n-gram K=4")
    parser.add_argument("--weight-formats", nargs="*", default=["Q4_0", "Q8_0"])
    parser.add_argument("--kv-prompt", type=int, default=512)
    parser.add_argument("--kv-gen", type=int, default=64)
    args = parser.parse_args()
    python = sys.executable
    command = shlex.join([os.path.relpath(python, ROOT) if python.startswith(str(ROOT)) else python,
                          *sys.argv])

    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            quick_setup(args, pathlib.Path(tmp))
        for path in (args.servelab, args.model, args.trace):
            if not path.exists():
                raise SystemExit(f"triangle_sweep: {path} not found (make build; tools/setup/setup.sh)")
        quiet = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
        notes = []
        models = weight_files(args, notes)
        grid = make_grid(args, models)
        load_start, start = load_average(), time.time()
        runs = {p["name"]: [] for p in grid}
        total = args.repeats * len(grid)
        for r in range(args.repeats):
            shift = r * len(grid) // args.repeats  # a rotated order per repeat
            for i, p in enumerate(grid[shift:] + grid[:shift]):
                done = r * len(grid) + i + 1
                print(f"triangle_sweep: [{done}/{total}] repeat {r + 1} {p['name']}",
                      file=sys.stderr, flush=True)
                report, rusage = run_measured(p["cmd"], args.threads)
                figures = (throughput_figures if p["kind"] == "throughput" else bench_figures)
                runs[p["name"]].append(figures(report, rusage))
                if p["kind"] == "throughput" and "config" not in p:
                    p["config"] = report["config"]
        points = []
        for p in grid:
            entry = {k: v for k, v in p.items() if k != "cmd"}
            entry["command"] = f"OMP_NUM_THREADS={args.threads} " + shlex.join(
                [os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c for c in p["cmd"]])
            entry["runs"] = runs[p["name"]]
            entry["median"] = medians(runs[p["name"]])
            points.append(entry)
        serving = [p for p in points if p["kind"] == "throughput"]
        base_cfg = next(p for p in points if p["name"] == "baseline")["config"]
        result = {
            "header": {
                "what": "chapter 11.8's latency-throughput-cost triangle: one trace over a grid of "
                        "engine settings (tools/reports/triangle_sweep.py)",
                "machine": cpu_name(), "threads": args.threads,
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                "command": command, "servelab": os.path.relpath(args.servelab, ROOT),
                "git": git_describe(), "quick": args.quick, "repeats": args.repeats,
                "model": "tiny random (quick)" if args.quick else os.path.relpath(args.model, ROOT),
                "model_name": base_cfg["model"], "trace": os.path.relpath(args.trace, ROOT),
                "trace_name": args.trace.stem, "limit": args.limit, "max_output": args.max_output,
                "request_rate": args.request_rate,
                "baseline": {k: base_cfg[k] for k in ("max_num_seqs", "max_num_batched_tokens",
                                                     "long_prefill_tokens", "num_kv_blocks",
                                                     "kv_cache", "arrivals")},
                "load_average_start": load_start, "load_average_end": load_average(),
                "waited_for_quiet": quiet, "sweep_seconds": time.time() - start,
                "cost": "core-seconds (child user+sys CPU, os.wait4) per 1,000 output tokens, "
                        "model loading included; peak_mb = the child's ru_maxrss",
                "kv_dtype_note": "the paged KV pool (bench throughput, the server) holds f32 "
                                 "only; the KV-dtype points are `servelab bench --kv-layout "
                                 "contiguous`, one sequence, not the serving trace",
                "notes": notes},
            "points": points,
            "frontier": {key: pareto(serving, key) for key in ("tpot_p50_ms", "ttft_p50_ms")},
            "kv_capacity": kv_capacity(args, base_cfg["num_kv_blocks"]),
        }
        result["deltas"] = deltas(points)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(points_table(result), "", kv_table(result), "", deltas_table(result), sep="\n")
    for note in notes:
        print(f"note: {note}")
    print(f"\n{len(grid)} points x {args.repeats} repeats in "
          f"{result['header']['sweep_seconds']:.0f} s; load {load_start:.2f} -> "
          f"{result['header']['load_average_end']:.2f}; wrote {args.output}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        plot_frontier(result).savefig(args.plot, dpi=110, bbox_inches="tight")
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
