#!/usr/bin/env python3
"""cpu_peer_report.py — servelab against llama.cpp's own benchmark tools, same GGUF, threads, machine.

`make cpu-report`. The peer is what a llama.cpp user would run to measure
speed: `llama-bench` and `llama-batched-bench`, built from the llama.cpp
source vendored in the pinned llama-cpp-python sdist (tools/build_peers.sh,
cached under build/peers/). servelab runs through `servelab bench --json` at
its defaults (no --cpu-kernels flag: what every command gives a user), and
also in exact mode (fp32 activations, the numpy oracle's numbers) as a
secondary line.

  decode-1      batch-1 decode tokens/s: llama-bench tg128 (128 tokens from
                an empty cache) against servelab's 1-token prompt + 128 tokens
  prefill-512   prompt tokens/s: llama-bench pp512 against a 512-token prompt
  decode-16     aggregate decode tokens/s of 16 sequences, 16-token prompts,
                128 tokens each: llama-batched-bench -npl 16 (S_TG) against
                `servelab bench -n 16`
  bandwidth     the 2-thread DRAM read rate (build/release/membw_probe) and
                the share of it batch-1 decode streams as weights

Every repetition runs every measurement of both engines, alternating which
goes first (A B, then B A), so a slow patch of a shared machine hits both;
each figure is the median over repetitions. Prints every figure with its
ratio and target; --out writes every sample as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TARGETS = {"decode-1": 1.2, "prefill-512": 1.2, "decode-16": 1.2}
BANDWIDTH_TARGET = 0.70


def log(message: str) -> None:
    print(f"[cpu-report] {message}", file=sys.stderr, flush=True)


def run_json(command: list[str], what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise RuntimeError(f"{what} failed ({' '.join(command)}):\n{tail}")
    return done.stdout


def ensure_peers() -> Path:
    """Builds llama.cpp's tools on first use (several minutes); returns their folder."""
    done = subprocess.run(["bash", str(ROOT / "tools/build_peers.sh"), "--print-dir"],
                          stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit("cpu-report: building llama.cpp's tools failed (see the log above)")
    return Path(done.stdout.strip())


class LlamaCpp:
    """llama.cpp's own benchmark programs."""

    def __init__(self, bin_dir: Path, model: Path, threads: int):
        self.bin_dir, self.model, self.threads = bin_dir, model, threads

    def bench(self, prompt: int, gen: int) -> float:
        out = run_json([str(self.bin_dir / "llama-bench"), "-m", str(self.model), "-t",
                        str(self.threads), "-p", str(prompt), "-n", str(gen), "-r", "1",
                        "-o", "json"], "llama-bench")
        return float(json.loads(out)[0]["avg_ts"])

    def decode_1(self, gen: int) -> float:
        return self.bench(0, gen)

    def prefill(self, prompt: int) -> float:
        return self.bench(prompt, 0)

    def decode_batched(self, prompt: int, gen: int, sequences: int) -> float:
        context = sequences * (prompt + gen) + 256
        out = run_json([str(self.bin_dir / "llama-batched-bench"), "-m", str(self.model), "-t",
                        str(self.threads), "-c", str(context), "-npp", str(prompt), "-ntg",
                        str(gen), "-npl", str(sequences), "--output-format", "jsonl"],
                       "llama-batched-bench")
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        return float(rows[-1]["speed_tg"])


class Servelab:
    """`servelab bench --json`; `mode` None = the defaults a user gets."""

    def __init__(self, binary: Path, model: Path, threads: int, mode: str | None):
        self.binary, self.model, self.threads, self.mode = binary, model, threads, mode
        self.weight_bytes_per_token = None

    def bench(self, *extra: str) -> dict:
        command = [str(self.binary), "-q", "bench", "--model", str(self.model), "--threads",
                   str(self.threads), "--repeats", "1", "--json", *extra]
        if self.mode is not None:
            command += ["--cpu-kernels", self.mode]
        return json.loads(run_json(command, "servelab bench"))

    def decode_1(self, gen: int) -> float:
        result = self.bench("--prompt-tokens", "1", "--gen-tokens", str(gen))
        self.weight_bytes_per_token = result.get("weight_bytes_per_token")
        return result["decode_tokens_per_s"]

    def prefill(self, prompt: int) -> float:
        return self.bench("--prompt-tokens", str(prompt), "--gen-tokens", "1")["prefill_tokens_per_s"]

    def decode_batched(self, prompt: int, gen: int, sequences: int) -> float:
        return self.bench("--prompt-tokens", str(prompt), "--gen-tokens", str(gen), "-n",
                          str(sequences))["decode_tokens_per_s"]


def membw(binary: Path, threads: int) -> float:
    out = run_json([str(binary), "--threads", str(threads), "--mib", "1024", "--passes", "5"],
                   "membw_probe")
    return json.loads(out)["median_gb_per_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--servelab-bin", type=Path, default=ROOT / "build/release/servelab")
    parser.add_argument("--membw-bin", type=Path, default=ROOT / "build/release/membw_probe")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--gen-tokens", type=int, default=128)
    parser.add_argument("--prefill-tokens", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16, help="concurrent sequences")
    parser.add_argument("--batch-prompt", type=int, default=16, help="prompt tokens per sequence")
    parser.add_argument("--no-exact", action="store_true",
                        help="skip servelab's secondary exact-mode line")
    parser.add_argument("--out", type=Path, default=ROOT / "build/cpu_peer_report.json")
    args = parser.parse_args()
    for path, what in [(args.model, "model (make model)"),
                       (args.servelab_bin, "servelab (make build)"),
                       (args.membw_bin, "membw_probe (make build)")]:
        if not path.is_file():
            parser.error(f"no {what} at {path}")
    peers = ensure_peers()
    commit = (peers.parent / "commit").read_text().strip() if (peers.parent / "commit").exists() else "?"
    flags = (peers.parent / "stamp").read_text().strip() if (peers.parent / "stamp").exists() else "?"

    engines: dict[str, object] = {
        "llama.cpp": LlamaCpp(peers, args.model, args.threads),
        "servelab": Servelab(args.servelab_bin, args.model, args.threads, None),
    }
    if not args.no_exact:
        engines["servelab exact"] = Servelab(args.servelab_bin, args.model, args.threads, "exact")
    figures = {
        "decode-1": lambda e: e.decode_1(args.gen_tokens),
        "prefill-512": lambda e: e.prefill(args.prefill_tokens),
        "decode-16": lambda e: e.decode_batched(args.batch_prompt, args.gen_tokens, args.batch),
    }
    samples: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    names = list(engines)
    for repetition in range(args.repetitions):
        log(f"repetition {repetition + 1}/{args.repetitions}")
        order = names if repetition % 2 == 0 else list(reversed(names))
        for figure, measure in figures.items():
            for name in order:
                add(f"{name} {figure}", measure(engines[name]))
        add("bandwidth GB/s", membw(args.membw_bin, args.threads))

    median = {name: statistics.median(values) for name, values in samples.items()}
    bandwidth = median["bandwidth GB/s"]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"\n{args.model.name}, {args.threads} threads, {cpu}, {date}; median of "
          f"{args.repetitions} interleaved repetitions")
    print(f"llama.cpp {commit} (llama-cpp-python sdist), built by tools/build_peers.sh")
    labels = {"decode-1": f"batch-1 decode tok/s (tg{args.gen_tokens})",
              "prefill-512": f"prefill tok/s (pp{args.prefill_tokens})",
              "decode-16": f"{args.batch}-sequence decode tok/s"}
    print(f"{'figure':<34} {'llama.cpp':>10} {'servelab':>10} {'ratio':>7}  target"
          + ("   exact  ratio" if not args.no_exact else ""))
    ratios = {}
    for figure, label in labels.items():
        theirs = median[f"llama.cpp {figure}"]
        ours = median[f"servelab {figure}"]
        ratios[figure] = ours / theirs
        verdict = "met" if ratios[figure] >= TARGETS[figure] else "MISSED"
        line = (f"{label:<34} {theirs:>10.1f} {ours:>10.1f} {ratios[figure]:>6.2f}x  "
                f">= {TARGETS[figure]}x {verdict}")
        if not args.no_exact:
            exact = median[f"servelab exact {figure}"]
            line += f"  {exact:>7.1f} {exact / theirs:>5.2f}x"
        print(line)
    shares = {}
    weight_bytes = engines["servelab"].weight_bytes_per_token
    if weight_bytes:
        for name in [n for n in names if n.startswith("servelab")]:
            streamed = weight_bytes * median[f"{name} decode-1"] / 1e9
            shares[name] = streamed / bandwidth
        # llama.cpp streams about the same bytes per token (the same GGUF tensors).
        shares["llama.cpp"] = weight_bytes * median["llama.cpp decode-1"] / 1e9 / bandwidth
        verdict = "met" if shares["servelab"] >= BANDWIDTH_TARGET else "MISSED"
        print(f"{'batch-1 weight stream / DRAM read':<34} {shares['llama.cpp']:>10.0%} "
              f"{shares['servelab']:>10.0%} {'':>7}  >= {BANDWIDTH_TARGET:.0%} {verdict}"
              + (f"  {shares['servelab exact']:>7.0%}" if "servelab exact" in shares else ""))
        print(f"  ({weight_bytes / 1e6:.1f} MB of weights per token; memory read "
              f"{bandwidth:.2f} GB/s, membw_probe, {args.threads} threads)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": date, "cpu": cpu, "model": str(args.model), "threads": args.threads,
        "repetitions": args.repetitions, "llama_cpp_commit": commit, "llama_cpp_build": flags,
        "samples": samples, "median": median, "ratios": ratios,
        "weight_bytes_per_token": weight_bytes, "bandwidth_share": shares,
    }, indent=1))
    log(f"every sample: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
