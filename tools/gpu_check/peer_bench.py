#!/usr/bin/env python3
"""peer_bench.py — servelab against llama.cpp's CUDA backend on the same GGUF, interleaved.

Part of the CUDA backend's checks (issue 48), run by tools/gpu_check.sh on the
GPU machine, which has Python but no packages: standard library only.

  run      one GGUF file: servelab (tools/gpu_check/e2e_bench.cpp --model) and
           llama.cpp (llama-bench, llama-batched-bench, built by
           tools/build_peers.sh --cuda) in turn, S L S L ..., for --rounds
           rounds; the medians and every sample go to --out (JSON).
  summary  the table of every run's JSON: tokens/s of both, the ratio
           servelab / llama.cpp against the issue's targets, and the share
           of the copy bandwidth that batch-1 decode reaches by the bytes
           each engine actually reads per token.

The cases, the same work on both sides:
  decode-1      batch-1 decode: e2e_bench --batches 1 (32-token prompt, then
                --decode-tokens) against llama-bench tg128 (-n --decode-tokens);
  decode-64,    aggregate decode of 64 and 256 sequences of 32-token prompts,
  decode-256    --decode-tokens each: e2e_bench --batches 64,256 against
                llama-batched-bench -npp 32 -ntg T -npl 64,256 (S_TG);
  prefill       servelab: 16 prompts of 512 tokens in steps of 2048 tokens;
                llama.cpp: llama-bench pp512 (one prompt, batch 2048, micro-
                batch 512). Not the same batch: shown, not targeted.
Both engines at their defaults, every layer on the GPU (-ngl 99), flash
attention as llama.cpp chooses it (auto: on for CUDA).

Usage:
  peer_bench.py run --model F.gguf --label "1B Q4_1" --e2e BIN --llama-dir DIR
                    --out F.json [--rounds 2] [--decode-tokens 128] [--log F]
                    [--budget-s S] [--no-peer]
  peer_bench.py summary F.json ...
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = ("decode-1", "decode-64", "decode-256", "prefill")
# The acceptance: servelab / llama.cpp at least this (issue 48).
TARGETS = {"decode-1": 1.2, "decode-64": 1.5, "decode-256": 1.5}
BANDWIDTH_TARGET = 0.70
PROMPT_TOKENS = 32
PREFILL_TOKENS = 512


def run_command(command: list[str], log, timeout_s: float) -> tuple[str, str]:
    """stdout and stderr of `command`, both also appended to the log; raises on failure."""
    log.write(f"\n$ {' '.join(command)}\n")
    log.flush()
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    log.write(done.stdout + done.stderr + f"[exit {done.returncode}, {time.monotonic() - start:.1f} s]\n")
    log.flush()
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{Path(command[0]).name} exited {done.returncode}: {tail[0]}")
    return done.stdout, done.stderr


def parse_servelab(output: str) -> dict:
    """e2e_bench's JSON lines: the model line, one decode line per batch, prefill."""
    figures = {}
    for line in output.splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if row["case"] == "model":
            figures["copy_gbs"] = row["copy_gbs"]
            figures["servelab_read_bytes_per_token"] = row["servelab_read_bytes_per_token"]
            figures["file_read_bytes_per_token"] = row["file_read_bytes_per_token"]
        elif row["case"] == "decode":
            figures[f"decode-{row['batch']}"] = row["tokens_per_s"]
        elif row["case"] == "prefill":
            figures["prefill"] = row["tokens_per_s"]
    return figures


def parse_llama_bench(output: str) -> dict:
    """llama-bench -o json: one entry per test, n_prompt > 0 for pp, n_gen > 0 for tg."""
    start = output.index("[")
    entries = json.JSONDecoder().raw_decode(output[start:])[0]
    figures = {}
    for entry in entries:
        if entry.get("n_gen", 0) > 0:
            figures["decode-1"] = float(entry["avg_ts"])
        elif entry.get("n_prompt", 0) > 0:
            figures["prefill"] = float(entry["avg_ts"])
    return figures


def parse_batched_bench(output: str) -> dict:
    """llama-batched-bench --output-format jsonl: S_TG (speed_tg) per sequence count."""
    figures = {}
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{") and "speed_tg" in line:
            row = json.loads(line)
            figures[f"decode-{row['pl']}"] = float(row["speed_tg"])
    return figures


def servelab_round(args, log, timeout_s: float) -> dict:
    command = [args.e2e, "--model", args.model, "--batches", "1," + args.sequences,
               "--decode-tokens", str(args.decode_tokens), "--prompt-tokens", str(PROMPT_TOKENS)]
    return parse_servelab(run_command(command, log, timeout_s)[1])


def llama_round(args, log, timeout_s: float) -> dict:
    bench = [str(Path(args.llama_dir) / "llama-bench"), "-m", args.model, "-ngl", "99",
             "-p", str(PREFILL_TOKENS), "-n", str(args.decode_tokens), "-r", "1", "-o", "json"]
    figures = parse_llama_bench(run_command(bench, log, timeout_s)[0])
    most = max(int(n) for n in args.sequences.split(","))
    context = most * (PROMPT_TOKENS + args.decode_tokens) + 256
    batched = [str(Path(args.llama_dir) / "llama-batched-bench"), "-m", args.model, "-ngl", "99",
               "-c", str(context), "-npp", str(PROMPT_TOKENS), "-ntg", str(args.decode_tokens),
               "-npl", args.sequences, "--output-format", "jsonl"]
    figures.update(parse_batched_bench("\n".join(run_command(batched, log, timeout_s))))
    return figures


def median_of(samples: list[dict], key: str):
    values = [s[key] for s in samples if key in s]
    return statistics.median(values) if values else None


def run(args) -> int:
    result = {"label": args.label, "model": args.model, "rounds": args.rounds,
              "decode_tokens": args.decode_tokens, "samples": {"servelab": [], "llama.cpp": []},
              "errors": []}
    deadline = time.monotonic() + args.budget_s
    with open(args.log or "/dev/null", "a") as log:
        for _ in range(args.rounds):
            engines = [("servelab", servelab_round), ("llama.cpp", llama_round)]
            for engine, one_round in engines[:1] if args.no_peer else engines:
                left = deadline - time.monotonic()
                if left < 5:
                    result["errors"].append(f"{engine}: out of time ({args.budget_s:.0f} s budget)")
                    continue
                try:
                    result["samples"][engine].append(one_round(args, log, left))
                except (OSError, RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as error:
                    result["errors"].append(f"{engine}: {error}")
    for engine in ("servelab", "llama.cpp"):
        result[engine] = {case: median_of(result["samples"][engine], case) for case in CASES}
    servelab = result["samples"]["servelab"]
    for key in ("copy_gbs", "servelab_read_bytes_per_token", "file_read_bytes_per_token"):
        result[key] = median_of(servelab, key)
    failed = not servelab or bool(result["errors"])
    if args.no_peer:
        result["errors"].append("llama.cpp: not run (its binaries were not carried)")
    else:
        failed |= not result["samples"]["llama.cpp"]
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 1 if failed else 0


def share(tokens_per_s, bytes_per_token, copy_gbs) -> str:
    if not tokens_per_s or not bytes_per_token or not copy_gbs:
        return "-"
    return f"{100 * tokens_per_s * bytes_per_token / (copy_gbs * 1e9):.0f}%"


def format_rate(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def summary_rows(result: dict) -> list[str]:
    rows = []
    for case in CASES:
        ours, theirs = result["servelab"].get(case), result["llama.cpp"].get(case)
        ratio = f"{ours / theirs:.2f}x" if ours and theirs else "-"
        target = TARGETS.get(case)
        verdict = "" if target is None or ratio == "-" else (
            f">= {target}x {'met' if ours / theirs >= target else 'NOT met'}")
        rows.append(f"{result['label']:<12} {case:<11} {format_rate(ours):>14} "
                    f"{format_rate(theirs):>15} {ratio:>7}  {verdict}")
    copy = result.get("copy_gbs")
    ours_share = share(result["servelab"].get("decode-1"), result.get("servelab_read_bytes_per_token"), copy)
    theirs_share = share(result["llama.cpp"].get("decode-1"), result.get("file_read_bytes_per_token"), copy)
    gb = lambda key: "-" if not result.get(key) else f"{result[key] / 1e9:.2f} GB"  # noqa: E731
    rows.append(f"{'':<12} batch-1 bandwidth: servelab {ours_share} ({gb('servelab_read_bytes_per_token')}"
                f"/token), llama.cpp {theirs_share} ({gb('file_read_bytes_per_token')}/token) "
                f"of {format_rate(copy)} GB/s copy (target {BANDWIDTH_TARGET:.0%} on 8B)")
    for error in result.get("errors", []):
        rows.append(f"{'':<12} error: {error}")
    return rows


def summary(paths: list[str]) -> int:
    print("servelab vs llama.cpp CUDA: same GGUF, interleaved runs, medians (tokens/s)")
    print(f"{'model':<12} {'case':<11} {'servelab':>14} {'llama.cpp':>15} {'ratio':>7}  target")
    for path in paths:
        print("\n".join(summary_rows(json.loads(Path(path).read_text()))))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("run")
    one.add_argument("--model", required=True)
    one.add_argument("--label", required=True)
    one.add_argument("--e2e", required=True, help="cuda_e2e_bench")
    one.add_argument("--llama-dir", required=True, help="folder of llama-bench, llama-batched-bench")
    one.add_argument("--out", required=True)
    one.add_argument("--log")
    one.add_argument("--rounds", type=int, default=2)
    one.add_argument("--decode-tokens", type=int, default=128)
    one.add_argument("--sequences", default="64,256")
    one.add_argument("--budget-s", type=float, default=600.0)
    one.add_argument("--no-peer", action="store_true",
                     help="servelab alone (the llama.cpp binaries were not carried)")
    table = commands.add_parser("summary")
    table.add_argument("results", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args)
    return summary(args.results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
