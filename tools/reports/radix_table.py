#!/usr/bin/env python3
"""radix_table.py — Lab 11's experiment: the hash-chain and radix prefix caches, FCFS and
longest-prefix-match admission, on four traces and two KV pool sizes, with the model.

Part of Lab 11, RadixAttention (chapter 11.7: SGLang's radix tree and its
cache-aware scheduling). For each trace in data/traces/ (multi_turn,
few_shot, branching, no_sharing — data/traces/README.md) it

  1. sizes the working set: `servelab bench prefix-cache` (no model) with a
     pool too large to evict anything reports how many distinct full blocks
     the trace leaves cached;
  2. runs `servelab bench throughput` on the whole trace, all requests at
     once, for hash+FCFS, radix+FCFS and radix+LPM, under a KV pool that
     holds the working set and one that holds a quarter of it;
  3. records the prefix hit rate, tokens computed, TTFT p50/p99, output
     tokens/s and preemptions of each run.

The runs of one trace and pool are interleaved config by config, --rounds
times (default 1), and each figure is the median over rounds. Results go to
data/results/lab11_radix_table.json (what notebooks/lab11_radix_attention.ipynb
plots) and a markdown table on stdout (what docs/perf.md and the handout show).

    .venv/bin/python tools/reports/radix_table.py          # everything, about an hour on 2 cores
    .venv/bin/python tools/reports/radix_table.py --traces branching --pools quarter --limit 32  # quick
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRACES = ["multi_turn", "few_shot", "branching", "no_sharing"]
CONFIGS = [("hash", "fcfs"), ("radix", "fcfs"), ("radix", "lpm")]
BLOCK_SIZE = 16
# SmolLM2-135M's f32 KV per block: 30 layers x (K and V) x 3 KV heads x 64 x 4 bytes x 16 tokens.
SMOLLM2_BLOCK_KIB = 30 * 2 * 3 * 64 * 4 * BLOCK_SIZE // 1024


def run_json(cmd: list[str]) -> dict:
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        sys.exit(f"radix_table: {' '.join(cmd)} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout)


def working_set_blocks(servelab: str, trace: pathlib.Path, limit: int) -> int:
    report = run_json([servelab, "bench", "prefix-cache", "--json", "--trace", str(trace),
                       "--limit", str(limit), "--kv-blocks", str(1 << 20)])
    return int(report["cached_blocks"])


def bench(args, trace: pathlib.Path, cache: str, policy: str, blocks: int) -> dict:
    report = run_json([args.servelab, "bench", "throughput", "--json", "--no-progress",
                       "--model", args.model, "--trace", str(trace), "--limit", str(args.limit),
                       "--prefix-cache", cache, "--policy", policy,
                       "--kv-memory", f"{blocks * SMOLLM2_BLOCK_KIB}KiB"])
    s = report["summary"]
    return {"num_kv_blocks": report["config"]["num_kv_blocks"],
            "prefix_hit_rate": s["prefix_hit_rate"], "tokens_computed": s["tokens_computed"],
            "ttft_p50_ms": s["ttft_ms"]["median"], "ttft_p99_ms": s["ttft_ms"]["p99"],
            "output_tokens_per_s": s["output_tokens_per_s"], "preemptions": s["preemptions"],
            "duration_s": s["duration_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", default=str(ROOT / "build" / "release" / "servelab"))
    parser.add_argument("--model", default="data/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--traces", nargs="+", default=TRACES, choices=TRACES)
    parser.add_argument("--pools", nargs="+", default=["full", "quarter"], choices=["full", "quarter"])
    parser.add_argument("--limit", type=int, default=0, help="first N requests of each trace (0: all)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "data" / "results" / "lab11_radix_table.json"))
    args = parser.parse_args()

    rows = []
    for name in args.traces:
        trace = ROOT / "data" / "traces" / f"{name}.jsonl"
        working_set = working_set_blocks(args.servelab, trace, args.limit)
        for pool in args.pools:
            blocks = working_set if pool == "full" else max(1, working_set // 4)
            runs = {config: [] for config in CONFIGS}
            for round_index in range(args.rounds):
                for cache, policy in CONFIGS:
                    print(f"radix_table: {name}, {pool} pool ({blocks} blocks), {cache}+{policy}, "
                          f"round {round_index + 1}/{args.rounds}", file=sys.stderr, flush=True)
                    runs[(cache, policy)].append(bench(args, trace, cache, policy, blocks))
            for (cache, policy), results in runs.items():
                row = {"trace": name, "pool": pool, "working_set_blocks": working_set,
                       "prefix_cache": cache, "policy": policy}
                for key in results[0]:
                    row[key] = statistics.median(r[key] for r in results)
                rows.append(row)
    header = {"made_by": "tools/reports/radix_table.py " + " ".join(sys.argv[1:]),
              "date": datetime.date.today().isoformat(),
              "machine": f"{platform.machine()}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} threads",
              "model": pathlib.Path(args.model).name, "rounds": args.rounds, "limit": args.limit}
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
    print(f"radix_table: wrote {out}", file=sys.stderr)

    print("| trace | pool (blocks) | cache + policy | hit rate | tokens computed | TTFT p50 / p99 ms "
          "| output tok/s | vs hash+FCFS | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        base = next(r for r in rows if r["trace"] == row["trace"] and r["pool"] == row["pool"]
                    and r["prefix_cache"] == "hash")
        speedup = row["output_tokens_per_s"] / base["output_tokens_per_s"]
        print(f"| {row['trace']} | {row['pool']} ({int(row['num_kv_blocks'])}) | "
              f"{row['prefix_cache']}+{row['policy']} | {100 * row['prefix_hit_rate']:.1f}% | "
              f"{int(row['tokens_computed'])} | {row['ttft_p50_ms']:.0f} / {row['ttft_p99_ms']:.0f} | "
              f"{row['output_tokens_per_s']:.1f} | {speedup:.2f}x | {int(row['preemptions'])} |")


if __name__ == "__main__":
    main()
