#!/usr/bin/env python3
"""llamacpp_logit_diff.py — how far servelab's logits are from llama.cpp's, and where greedy parts.

For every prompt of data/golden/llamacpp_greedy.json, runs `servelab logits`
on the prompt plus llama.cpp's continuation (teacher forcing) and reports:
  - |our logit - llama.cpp's logit| of llama.cpp's chosen token at each step
    (median, p90, p99, max over all steps): the size of llama.cpp's
    activation-quantization error, which sets the near-tie epsilon of
    tests/unit/llamacpp_agreement_test.cpp;
  - per prompt, the first step where our argmax differs and our top-2 gap there.
With --cpu-kernels exact fast, it does so for each mode and then reports how
far fast mode's logits (int8 activations) are from exact mode's: the
accuracy cost of fast mode on the golden prompts (issue 11).

Usage: .venv/bin/python tools/goldens/llamacpp_logit_diff.py [--servelab build/release/servelab]
           [--cpu-kernels exact fast]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", default=str(ROOT / "build" / "release" / "servelab"))
    parser.add_argument("--model", default=str(ROOT / "data" / "models" /
                                               "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--cpu-kernels", nargs="+", default=["exact"], choices=["exact", "fast"])
    args = parser.parse_args()
    golden = json.loads((ROOT / "data" / "golden" / "llamacpp_greedy.json").read_text())
    all_logits = {}
    for mode in args.cpu_kernels:
        print(f"--cpu-kernels {mode}")
        all_logits[mode] = compare_with_llamacpp(args, golden, mode)
    if len(all_logits) == 2:
        exact, fast = all_logits["exact"], all_logits["fast"]
        differences = np.concatenate([np.abs(f - e).ravel() for f, e in zip(fast, exact)])
        top_equal = sum(int((f.argmax(axis=1) == e.argmax(axis=1)).sum()) for f, e in zip(fast, exact))
        rows = sum(len(e) for e in exact)
        spread = np.median([float(e.std()) for e in exact])
        print(f"fast vs exact, every logit of {rows} positions: median |difference| "
              f"{np.median(differences):.4f}, p99 {np.percentile(differences, 99):.4f}, max "
              f"{differences.max():.4f} (a row's logits have a standard deviation of {spread:.2f}); "
              f"argmax equal at {top_equal} of {rows} positions")
    return 0


def compare_with_llamacpp(args, golden, mode: str) -> list:
    differences, agreed_total, generated_total, every_logits = [], 0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "logits.f32"
        for prompt in golden["prompts"]:
            generated = prompt["generated_ids"]
            sequence = prompt["prompt_ids"] + generated[:-1]
            subprocess.run([args.servelab, "-q", "logits", "-m", args.model, "--cpu-kernels", mode,
                            "--tokens", ",".join(map(str, sequence)), "-o", str(out)], check=True)
            logits = np.fromfile(out, dtype=np.float32).reshape(len(sequence), -1)
            first_row = len(prompt["prompt_ids"]) - 1
            every_logits.append(logits[first_row:])
            divergence, gap_there = None, None
            for step, token in enumerate(generated):
                row = logits[first_row + step]
                differences.append(abs(float(row[token]) - prompt["top1_logits"][step]))
                top = np.argsort(row)[::-1][:2]
                if divergence is None and top[0] != token:
                    divergence, gap_there = step, float(row[top[0]] - row[top[1]])
            agreed = len(generated) if divergence is None else divergence
            agreed_total += agreed
            generated_total += len(generated)
            where = "equal to the end" if divergence is None else \
                f"first divergence at step {divergence}, our top-2 gap {gap_there:.3f}, " \
                f"llama.cpp's {prompt['top2_gaps'][divergence]:.3f}"
            print(f"{prompt['name']:>16}: {agreed}/{len(generated)} equal; {where}")
    d = np.array(differences)
    print(f"|ours - llama.cpp| logit of llama.cpp's token over {d.size} steps: median "
          f"{np.median(d):.3f}, p90 {np.percentile(d, 90):.3f}, p99 {np.percentile(d, 99):.3f}, "
          f"max {d.max():.3f}")
    print(f"greedy agreement: {agreed_total} of {generated_total} golden tokens equal before the "
          f"first divergence")
    return every_logits


if __name__ == "__main__":
    sys.exit(main())
