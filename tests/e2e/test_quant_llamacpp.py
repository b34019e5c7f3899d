#!/usr/bin/env python3
"""test_quant_llamacpp.py — `servelab perplexity` and the files `servelab quantize` writes, against llama.cpp.

Part of Lab 10, weight quantization (docs/perplexity.md). Building llama.cpp
takes longer than a test run may, so its answers are goldens:
data/golden/llamacpp_quant.json (tools/goldens/make_quant_goldens.py) holds, for each
model file, keyed by its sha256, what llama.cpp's own tools said about it:

  perplexity  llama-perplexity -c 128 --chunks 8 on data/text/kjv_evaluation.txt
  completion  llama-completion's greedy 24 tokens after "The capital of France is"

For each entry named on the command line this test
  1. makes the file again with the entry's `servelab quantize` command (the
     downloaded model itself for the source entry) and checks that its
     sha256 is the golden's key: the quantizer still writes the very file
     llama.cpp read. A different hash means the quantizer changed: run
     tools/goldens/make_quant_goldens.py again;
  2. runs `servelab perplexity` with the same windows and requires
     |PPL − llama.cpp's PPL| <= --tolerance × llama.cpp's PPL (1% by default:
     llama.cpp rounds activations to 8 bits in its quantized matmuls and
     keeps the KV cache in F16, so the two are not bit-equal; measured gaps
     are printed, and docs/perplexity.md records them);
  3. feeds llama.cpp's prompt and greedy continuation through `servelab
     logits` (teacher forcing: one pass gives the states servelab's own greedy
     run would have had up to the first disagreement) and requires servelab's
     argmax to equal llama.cpp's token at every position up to the first
     difference, and there servelab's top-2 logit gap to be below 0.5 — a
     near tie, where either token is right (as tests/unit/llamacpp_agreement_test.cpp).

    test_quant_llamacpp.py --servelab build/release/servelab source_q4_1 rtn_q4_0

Exit status 0 pass, 1 fail, 77 skipped (the model or the evaluation text missing).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "setup"))
from fetch_model import sha256_of  # noqa: E402  (the hash the goldens were made with)
GOLDEN = ROOT / "data" / "golden" / "llamacpp_quant.json"
SOURCE = ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
NEAR_TIE_GAP = 0.5
SKIP = 77


def run(cmd: list[str]) -> str:
    # From the repository root: the goldens' commands name the model relative to it.
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if result.returncode != 0:
        raise SystemExit(f"FAIL: {shlex.join(cmd)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return result.stdout


def make_file(servelab: str, entry: dict, workdir: pathlib.Path) -> pathlib.Path:
    if not entry["recreate"]:
        return SOURCE
    out = workdir / entry["file"]
    args = shlex.split(entry["recreate"].format(out=out))
    run([servelab, *args[1:]])
    return out


def check_perplexity(servelab: str, path: pathlib.Path, golden: dict, tolerance: float,
                     threads: int) -> list[str]:
    want = golden["perplexity"]
    report = json.loads(run([servelab, "perplexity", "-m", str(path), "--text",
                             str(ROOT / "data/text/kjv_evaluation.txt"), "-c", str(want["context"]),
                             "--chunks", str(want["chunks"]), "-t", str(threads), "--json"]))
    got = report["perplexity"]
    gap = abs(got - want["ppl"]) / want["ppl"]
    print(f"  perplexity: servelab {got:.4f} +/- {report['perplexity_stderr']:.4f}, llama.cpp "
          f"{want['ppl']:.4f} +/- {want['ppl_stderr']:.4f} ({100 * gap:.2f}% apart, "
          f"{report['scored_tokens']} predictions)")
    if report["scored_tokens"] != want["chunks"] * (want["context"] - want["context"] // 2 - 1):
        return [f"servelab scored {report['scored_tokens']} predictions; llama-perplexity's "
                f"scheme scores {want['context'] - want['context'] // 2 - 1} per window"]
    if gap > tolerance:
        return [f"perplexity {got:.4f} is {100 * gap:.2f}% from llama.cpp's {want['ppl']:.4f} "
                f"(tolerance {100 * tolerance:.1f}%)"]
    return []


def check_greedy(servelab: str, path: pathlib.Path, golden: dict, threads: int,
                 workdir: pathlib.Path) -> list[str]:
    completion = golden["completion"]
    prompt, generated = completion["prompt_ids"], completion["generated_ids"]
    tokens = prompt + generated
    out = workdir / "logits.f32"
    run([servelab, "logits", "-m", str(path), "-t", str(threads), "--tokens",
         ",".join(str(t) for t in tokens), "--out", str(out)])
    logits = np.fromfile(out, dtype=np.float32).reshape(len(tokens), -1)
    agreed = 0
    for k, want in enumerate(generated):
        row = logits[len(prompt) - 1 + k]
        order = np.argsort(row)[::-1]
        if order[0] == want:
            agreed += 1
            continue
        gap = float(row[order[0]] - row[order[1]])
        print(f"  greedy: {agreed} of {len(generated)} tokens equal llama.cpp's, then servelab "
              f"prefers {order[0]} to {want} by {gap:.3f} logits")
        if gap >= NEAR_TIE_GAP:
            return [f"greedy token {k}: servelab's argmax {order[0]} beats llama.cpp's {want} by "
                    f"{gap:.3f} logits, not a near tie (< {NEAR_TIE_GAP})"]
        return []
    print(f"  greedy: all {len(generated)} tokens equal llama.cpp's "
          f"({completion['text'][:50]!r}...)")
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--tolerance", type=float, default=0.01, help="relative PPL gap allowed")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    parser.add_argument("names", nargs="+", help="golden entries to check (e.g. source_q4_1 rtn_q4_0)")
    args = parser.parse_args()
    text = ROOT / "data/text/kjv_evaluation.txt"
    if not SOURCE.exists() or not text.exists():
        print(f"SKIP: {SOURCE.name} or {text.name} missing (make setup makes both)")
        return SKIP
    golden = json.loads(GOLDEN.read_text())
    if sha256_of(text) != golden["header"]["text_sha256"]:
        print(f"FAIL: {text} is not the text the goldens were made on (tools/setup/make_text_data.py)")
        return 1
    by_name = {entry["name"]: (key, entry) for key, entry in golden["models"].items()}
    problems = []
    with tempfile.TemporaryDirectory(prefix="servelab_quant_") as tmp:
        workdir = pathlib.Path(tmp)
        for name in args.names:
            if name not in by_name:
                problems.append(f"{name}: no such golden entry ({', '.join(sorted(by_name))})")
                continue
            key, entry = by_name[name]
            print(f"{name}: {entry['recreate'] or 'the downloaded model'}", flush=True)
            path = make_file(args.servelab, entry, workdir)
            digest = sha256_of(path)
            if digest != key:
                problems.append(f"{name}: the file made now has sha256 {digest[:16]}..., the golden "
                                f"{key[:16]}...: the quantizer's output changed; run "
                                f"tools/goldens/make_quant_goldens.py --only {name} (needs tools/build_peers.sh)")
                continue
            problems += [f"{name}: {p}" for p in
                         check_perplexity(args.servelab, path, entry, args.tolerance, args.threads)]
            problems += [f"{name}: {p}" for p in
                         check_greedy(args.servelab, path, entry, args.threads, workdir)]
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
