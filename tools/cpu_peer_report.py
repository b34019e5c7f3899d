#!/usr/bin/env python3
"""cpu_peer_report.py — servelab against llama.cpp on the same GGUF, threads and machine.

Issue 11 (CPU performance). One command (`make cpu-report`) measures, with
the same thread count, prompt length and generation length:

servelab runs in each --cpu-kernels mode (exact: fp32 activations, the
numpy oracle's numbers; fast: int8 activations, as llama.cpp does).

  decode-1     batch-1 decode tokens/s after a short prompt
  prefill-512  prompt tokens/s for a 512-token prompt
  decode-16    servelab: aggregate decode tokens/s of 16 sequences at once
               (compared with its own batch-1 rate; llama.cpp's Python API
               runs one sequence)
  bandwidth    the machine's memory read bandwidth (build/release/membw_probe)
               and the share of it batch-1 decode uses streaming weights

llama.cpp runs in-process through llama-cpp-python (installed into .venv on
first use; pip builds llama.cpp from source, several minutes), timed around
llama_decode alone; servelab through `servelab bench --json`. Repetitions
interleave the engines (A B, then B A), and each figure is the median over
repetitions, so a slow patch of a shared machine hits both. Prints a table
with each figure and servelab's ratio; --out writes every sample as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from serve_side_by_side import ensure_llama_cpp_server

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def log(message: str) -> None:
    print(f"[cpu-report] {message}", file=sys.stderr, flush=True)


class LlamaCpp:
    """llama.cpp in this process: one context, timed around llama_decode."""

    def __init__(self, model: Path, threads: int, context: int):
        import llama_cpp
        import numpy as np
        self.np = np
        self.llm = llama_cpp.Llama(str(model), n_ctx=context, n_batch=512, n_ubatch=512,
                                   n_threads=threads, n_threads_batch=threads, verbose=False)
        self.vocab = self.llm.n_vocab()
        self.rng = np.random.default_rng(0)

    def prompt(self, length: int) -> list[int]:
        # Random ids, as servelab bench's prompt: the content does not change the work.
        return [int(t) for t in self.rng.integers(100, self.vocab, size=length)]

    def prefill_tokens_per_s(self, length: int) -> float:
        tokens = self.prompt(length)
        self.llm.reset()
        start = time.perf_counter()
        self.llm.eval(tokens)
        return length / (time.perf_counter() - start)

    def decode_tokens_per_s(self, prompt_length: int, gen_tokens: int) -> float:
        self.llm.reset()
        self.llm.eval(self.prompt(prompt_length))
        token = int(self.np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
        elapsed = 0.0
        for _ in range(gen_tokens - 1):
            start = time.perf_counter()
            self.llm.eval([token])
            elapsed += time.perf_counter() - start
            token = int(self.np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
        return (gen_tokens - 1) / elapsed


def servelab_bench(args, *extra: str) -> dict:
    command = [str(args.servelab_bin), "-q", "bench", "--model", str(args.model), "--threads",
               str(args.threads), "--repeats", "1", "--json", *extra]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def membw(args) -> float:
    done = subprocess.run([str(args.membw_bin), "--threads", str(args.threads), "--mib", "1024",
                           "--passes", "5"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["median_gb_per_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--servelab-bin", type=Path, default=ROOT / "build/release/servelab")
    parser.add_argument("--membw-bin", type=Path, default=ROOT / "build/release/membw_probe")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--decode-prompt", type=int, default=16)
    parser.add_argument("--gen-tokens", type=int, default=128)
    parser.add_argument("--prefill-tokens", type=int, default=512)
    parser.add_argument("--batch", type=int, default=16, help="servelab's concurrent sequences")
    parser.add_argument("--out", type=Path, default=ROOT / "build/cpu_peer_report.json")
    parser.add_argument("--cpu-kernels", nargs="+", default=["fast", "exact"],
                        choices=["fast", "exact"], help="servelab's modes to measure")
    args = parser.parse_args()
    for path, what in [(args.model, "model (make model)"),
                       (args.servelab_bin, "servelab (make build)"),
                       (args.membw_bin, "membw_probe (make build)")]:
        if not path.is_file():
            parser.error(f"no {what} at {path}")
    ensure_llama_cpp_server()  # the same pinned llama-cpp-python as make serve-report
    import llama_cpp

    llama = LlamaCpp(args.model, args.threads, context=args.prefill_tokens + args.gen_tokens + 64)
    samples: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    weight_bytes_per_token = None
    for repetition in range(args.repetitions):
        log(f"repetition {repetition + 1}/{args.repetitions}")
        engines = ["llama.cpp", "servelab"] if repetition % 2 == 0 else ["servelab", "llama.cpp"]
        for engine in engines:
            if engine == "llama.cpp":
                add("llama.cpp decode-1", llama.decode_tokens_per_s(args.decode_prompt,
                                                                    args.gen_tokens))
                add("llama.cpp prefill", llama.prefill_tokens_per_s(args.prefill_tokens))
                continue
            for mode in args.cpu_kernels:
                name = f"servelab {mode}"
                decode = servelab_bench(args, "--cpu-kernels", mode, "--prompt-tokens",
                                        str(args.decode_prompt), "--gen-tokens",
                                        str(args.gen_tokens))
                add(f"{name} decode-1", decode["decode_tokens_per_s"])
                weight_bytes_per_token = decode.get("weight_bytes_per_token")
                prefill = servelab_bench(args, "--cpu-kernels", mode, "--prompt-tokens",
                                         str(args.prefill_tokens), "--gen-tokens", "2")
                add(f"{name} prefill", prefill["prefill_tokens_per_s"])
                batched = servelab_bench(args, "--cpu-kernels", mode, "--prompt-tokens",
                                         str(args.decode_prompt), "--gen-tokens",
                                         str(args.gen_tokens), "-n", str(args.batch))
                add(f"{name} decode-{args.batch}", batched["decode_tokens_per_s"])
        add("bandwidth GB/s", membw(args))

    median = {name: statistics.median(values) for name, values in samples.items()}
    bandwidth = median["bandwidth GB/s"]
    print(f"\n{args.model.name}, {args.threads} threads, median of {args.repetitions} "
          f"interleaved repetitions; decode: {args.decode_prompt}-token prompt, "
          f"{args.gen_tokens} tokens")
    print(f"{'figure':<40} {'servelab':>10} {'llama.cpp':>10} {'ratio':>8}")
    shares = {}
    for mode in args.cpu_kernels:
        name = f"servelab {mode}"
        rows = [
            (f"[{mode}] batch-1 decode tokens/s", median[f"{name} decode-1"],
             median["llama.cpp decode-1"], "target >= 1.2x"),
            (f"[{mode}] {args.prefill_tokens}-token prefill tokens/s", median[f"{name} prefill"],
             median["llama.cpp prefill"], "target >= 1.0x"),
        ]
        for label, ours, theirs, target in rows:
            print(f"{label:<40} {ours:>10.1f} {theirs:>10.1f} {ours / theirs:>7.2f}x  {target}")
        aggregate = median[f"{name} decode-{args.batch}"]
        label = f"[{mode}] decode, {args.batch} sequences, tokens/s"
        print(f"{label:<40} {aggregate:>10.1f} {'':>10} "
              f"{aggregate / median[f'{name} decode-1']:>7.2f}x  (of its own batch-1; "
              "target >= 4x)")
        if weight_bytes_per_token:
            streamed = weight_bytes_per_token * median[f"{name} decode-1"] / 1e9
            shares[mode] = streamed / bandwidth
            label = f"[{mode}] batch-1 weight stream GB/s"
            print(f"{label:<40} {streamed:>10.2f}   = {shares[mode]:.0%} of the bandwidth "
                  f"({weight_bytes_per_token / 1e6:.1f} MB of weights per token; target >= 70%)")
    print(f"{'memory read bandwidth GB/s':<40} {bandwidth:>10.2f}   (membw_probe, "
          f"{args.threads} threads)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "model": str(args.model), "threads": args.threads, "repetitions": args.repetitions,
        "llama_cpp_python": llama_cpp.__version__, "samples": samples, "median": median,
        "weight_bytes_per_token": weight_bytes_per_token, "bandwidth_share": shares,
    }, indent=1))
    log(f"every sample: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
