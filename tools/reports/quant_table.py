#!/usr/bin/env python3
"""quant_table.py — Lab 10's table: RTN, AWQ and GPTQ at several bit widths and group sizes, measured.

Part of Lab 10, weight quantization (chapter 11.7 GPTQ and AWQ; 11.8 the
cost corner of the latency–throughput–cost triangle). For every method,
bit width and group size asked for, it

  1. writes the quantized model with `servelab quantize` (4 bits at groups of
     32, 64, 128 as Q4_0 blocks, symmetric, a real file llama.cpp runs; 3
     and 2 bits as F16 values of the asymmetric grid: fake quantization,
     no kernel reads 3-bit blocks, so no smaller file and no speed-up),
     recording its time and file size;
  2. scores it with `servelab perplexity --kl-against SOURCE` on the
     evaluation text (data/text/kjv_evaluation.txt, never the calibration
     half): perplexity, and the mean and p99 KL divergence of its
     next-token distributions from the source's;
  3. times its decode with `servelab bench` (tokens/s at batch 1).

The source row is the downloaded model itself (SmolLM2's Q4_1, 5.0 bits per
weight: its "full precision" is already 4-bit, docs/perplexity.md). Results
go to a JSON file (what notebooks/lab10_weight_quantization.ipynb plots) and
a markdown table on stdout (what docs/perf.md and the handout show).

    .venv/bin/python tools/reports/quant_table.py               # the full table, about 90 minutes on 2 cores
    .venv/bin/python tools/reports/quant_table.py --bits 4 --group-sizes 32 --chunks 4  # one column, quick
    .venv/bin/python tools/reports/quant_table.py --model data/tiny/m.gguf --context 64 --chunks 4 \\
        --calibration-tokens 64 --small                           # what the notebook's small mode runs
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
EVAL_TEXT = ROOT / "data/text/kjv_evaluation.txt"
CALIBRATION_TEXT = ROOT / "data/text/kjv_calibration.txt"
DEFAULT_OUT = ROOT / "data/results/lab10_quant_table.json"


def run_json(cmd: list[str]) -> dict:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"quant_table: {shlex.join(cmd)} failed ({result.returncode}):\n"
                         f"{result.stderr[-2000:]}")
    return json.loads(result.stdout)


def quantize(args, method: str, bits: int, group: int, out: pathlib.Path) -> dict:
    cmd = [str(args.servelab), "quantize", "-m", str(args.model), "-o", str(out), "--method", method,
           "--group-size", str(group), "--calibration", str(args.calibration),
           "--calibration-sequences", str(args.calibration_sequences),
           "--calibration-tokens", str(args.calibration_tokens), "--json"]
    cmd += ["--type", "q4_0"] if bits == 4 else ["--type", "fake", "--bits", str(bits)]
    start = time.perf_counter()
    report = run_json(cmd)
    report["wall_seconds"] = time.perf_counter() - start
    return report


def perplexity(args, model: pathlib.Path) -> dict:
    return run_json([str(args.servelab), "perplexity", "-m", str(model), "--text", str(args.text),
                     "-c", str(args.context), "--chunks", str(args.chunks),
                     "--kl-against", str(args.model), "--json"])


def decode_speed(args, model: pathlib.Path) -> float:
    report = run_json([str(args.servelab), "bench", "--json", "-m", str(model), "--prompt-tokens",
                       str(args.bench_prompt), "--gen-tokens", str(args.bench_gen), "--repeats", "3"])
    return report["decode_tokens_per_s"]


# Bits per weight of the block types a source's projections may have (scale and offset included).
TYPE_BITS = {"F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q4_1": 5.0, "Q4_0": 4.5}


def source_bits_per_weight(model: pathlib.Path) -> float:
    """What one weight of the source's projections costs, from the type of its first one."""
    from gguf import GGUFReader  # the official package, in .venv (tools/setup/requirements.txt)
    for tensor in GGUFReader(str(model)).tensors:
        if tensor.name == "blk.0.attn_q.weight":
            return TYPE_BITS[tensor.tensor_type.name]
    raise SystemExit(f"quant_table: {model} has no blk.0.attn_q.weight")


def row_of(method, bits, group, bpw, file_bytes, seconds, ppl, tok_s) -> dict:
    return {"method": method, "bits": bits, "group_size": group, "bits_per_weight": bpw,
            "file_bytes": file_bytes, "quantize_seconds": seconds,
            "perplexity": ppl["perplexity"], "perplexity_stderr": ppl["perplexity_stderr"],
            "kl_mean": ppl["kl"]["mean_nats"], "kl_p99": ppl["kl"]["p99_nats"],
            "top1_agreement": ppl["kl"]["top1_agreement"], "decode_tokens_per_s": tok_s}


def markdown(table: dict) -> str:
    lines = ["| method | bits | group | bits/weight | file MB | quantize s | PPL | KL mean | KL p99 "
             "| same top-1 | decode tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table["rows"]:
        lines.append(f"| {r['method']} | {r['bits']} | {r['group_size'] or '—'} | "
                     f"{r['bits_per_weight']:.2f} | {r['file_bytes'] / 1e6:.1f} | "
                     f"{r['quantize_seconds']:.1f} | {r['perplexity']:.3f} ± "
                     f"{r['perplexity_stderr']:.3f} | {r['kl_mean']:.4f} | {r['kl_p99']:.3f} | "
                     f"{100 * r['top1_agreement']:.1f}% | {r['decode_tokens_per_s']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servelab", type=pathlib.Path, default=ROOT / "build/release/servelab")
    parser.add_argument("--model", type=pathlib.Path, default=SOURCE_MODEL)
    parser.add_argument("--text", type=pathlib.Path, default=EVAL_TEXT)
    parser.add_argument("--calibration", type=pathlib.Path, default=CALIBRATION_TEXT)
    parser.add_argument("--methods", nargs="+", default=["rtn", "awq", "gptq"])
    parser.add_argument("--bits", nargs="+", type=int, default=[4, 3])
    parser.add_argument("--group-sizes", nargs="+", type=int, default=[32, 64, 128])
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--chunks", type=int, default=12)
    parser.add_argument("--calibration-sequences", type=int, default=16)
    parser.add_argument("--calibration-tokens", type=int, default=256)
    parser.add_argument("--bench-prompt", type=int, default=32)
    parser.add_argument("--bench-gen", type=int, default=32)
    parser.add_argument("--workdir", type=pathlib.Path, default=ROOT / "build/quant_table")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    parser.add_argument("--keep-files", action="store_true", help="keep the quantized models")
    parser.add_argument("--small", action="store_true", help="mark the result as a small run")
    args = parser.parse_args()
    for path in (args.servelab, args.model, args.text, args.calibration):
        if not path.exists():
            raise SystemExit(f"quant_table: {path} not found (make build; tools/setup/setup.sh)")
    args.workdir.mkdir(parents=True, exist_ok=True)

    rows = []
    source_bytes = args.model.stat().st_size
    print(f"quant_table: source {args.model.name}", file=sys.stderr, flush=True)
    source_ppl = perplexity(args, args.model)
    rows.append(row_of("source", 0, 0, source_bits_per_weight(args.model), source_bytes, 0.0,
                       source_ppl, decode_speed(args, args.model)))
    configs = [(b, g, m) for b in args.bits for g in args.group_sizes for m in args.methods]
    for k, (bits, group, method) in enumerate(configs, 1):
        out = args.workdir / f"{method}_{bits}bit_g{group}.gguf"
        print(f"quant_table: [{k}/{len(configs)}] {method} {bits}-bit groups of {group}",
              file=sys.stderr, flush=True)
        q = quantize(args, method, bits, group, out)
        ppl = perplexity(args, out)
        rows.append(row_of(method, bits, group, q["bits_per_weight"], q["file_bytes"],
                           q["calibration_seconds"] + q["quantize_seconds"] + q["write_seconds"],
                           ppl, decode_speed(args, out)))
        if not args.keep_files:
            out.unlink()
    table = {
        "header": {
            "made_by": "tools/reports/quant_table.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} threads",
            "model": args.model.name, "text": args.text.name, "context": args.context,
            "chunks": args.chunks, "calibration_sequences": args.calibration_sequences,
            "calibration_tokens": args.calibration_tokens, "small": args.small,
        },
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(markdown(table))
    print(f"quant_table: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
