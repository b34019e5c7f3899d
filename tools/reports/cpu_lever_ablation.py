#!/usr/bin/env python3
"""cpu_lever_ablation.py — what each CPU speed lever bought, variants measured side by side.

docs/perf.md's lever table. Each variant is a servelab binary (a build of
the tree with the lever in or out) and optional environment settings, e.g.

  tools/reports/cpu_lever_ablation.py \\
      --variant "before=/tmp/servelab_before" \\
      --variant "now=build/release/servelab" \\
      --variant "now, AVX2 cap=build/release/servelab SERVELAB_SIMD_LEVEL=avx2" \\
      --variant "now, exact=build/release/servelab --cpu-kernels exact"

Words after the path are NAME=VALUE environment settings or extra
`servelab bench` flags. Every repetition runs every variant on the three
figures of `make cpu-report` (batch-1 decode of 128 tokens after a 1-token
prompt, a 512-token prefill, 16 sequences decoding 128 tokens), in an order
that alternates each repetition; the table gives the median and each
variant's ratio to the first.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

FIGURES = {
    "decode-1": (["--prompt-tokens", "1", "--gen-tokens", "128"], "decode_tokens_per_s"),
    "prefill-512": (["--prompt-tokens", "512", "--gen-tokens", "1"], "prefill_tokens_per_s"),
    "decode-16": (["--prompt-tokens", "16", "--gen-tokens", "128", "-n", "16"],
                  "decode_tokens_per_s"),
}


def parse_variant(text: str) -> tuple[str, str, dict[str, str], list[str]]:
    name, _, rest = text.partition("=")
    words = rest.split()
    if not name or not words:
        raise SystemExit(f"--variant wants NAME=PATH [ENV=VALUE | --flag ...], got {text!r}")
    env = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words[1:]
           if "=" in w and not w.startswith("-")}
    flags = [w for w in words[1:] if "=" not in w or w.startswith("-")]
    return name, words[0], env, flags


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", required=True)
    parser.add_argument("--model", default="data/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    samples: dict[tuple[str, str], list[float]] = {}
    for repetition in range(args.repetitions):
        print(f"[levers] repetition {repetition + 1}/{args.repetitions}", file=sys.stderr)
        order = variants if repetition % 2 == 0 else list(reversed(variants))
        for figure, (flags, key) in FIGURES.items():
            for name, path, env, extra in order:
                command = [path, "-q", "bench", "--model", args.model, "--threads",
                           str(args.threads), "--repeats", "1", "--json", *flags, *extra]
                done = subprocess.run(command, capture_output=True, text=True,
                                      env={**os.environ, **env})
                if done.returncode != 0:
                    raise SystemExit(f"{name}: {' '.join(command)} failed:\n{done.stderr}")
                samples.setdefault((name, figure), []).append(json.loads(done.stdout)[key])
    first = variants[0][0]
    print(f"\nmedian of {args.repetitions} interleaved repetitions, {args.threads} threads, "
          "tokens/s (ratio to the first variant)")
    print(f"{'variant':<28}" + "".join(f"{f:>22}" for f in FIGURES))
    for name, *_ in variants:
        cells = []
        for figure in FIGURES:
            value = statistics.median(samples[(name, figure)])
            base = statistics.median(samples[(first, figure)])
            cells.append(f"{value:>13.1f} ({value / base:.2f}x)")
        print(f"{name:<28}" + "".join(f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
