#!/usr/bin/env python3
"""test_numpy_oracle.py — end-to-end check of `servelab logits` against the numpy oracle.

What it checks
--------------
For every prompt, `servelab logits` must produce the same logits, at every
position, as tools/goldens/numpy_oracle.py (an independent float64 forward pass that
reads the GGUF with the official `gguf` package). The figure of merit, per
position, is

    max_j |ours[j] - oracle[j]|  /  max_j |oracle[j]|

and the worst position of a prompt must be <= --tolerance (default 1e-4).
The worst figure of every prompt is printed, so a regression is visible even
when the test still passes.

Prompts: a few fixed ones plus fresh random token ids drawn with a seed taken
from the clock. The seed is printed; rerun with --seed N to reproduce a failure.

Two ways to run it
------------------
    # a real model
    test_numpy_oracle.py --servelab build/release/servelab --model data/models/M.gguf
    # a tiny random model made on the spot by `servelab make-tiny-model`
    test_numpy_oracle.py --servelab build/release/servelab --tiny q4_0 [--untied]
    # the same with multi-head latent attention (a deepseek2 model, dense MLP)
    test_numpy_oracle.py --servelab build/release/servelab --tiny f32 --mla [--q-lora-rank 16]

Exit status: 0 pass, 1 fail, 77 skipped (model file missing; ctest SKIP_RETURN_CODE).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see tools/goldens/numpy_oracle.py
import numpy as np  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "goldens"))
import numpy_oracle  # noqa: E402

SKIP = 77

# Real prompts for SmolLM2 (its vocabulary), tokenized by llama.cpp (llama-cpp-python 0.3.36).
SMOLLM2_PROMPTS = {
    # "The capital of France is"
    "plain_capital": [504, 3575, 282, 4649, 314],
    # "Once upon a time, in a small village nestled between rolling hills, there lived"
    "plain_story": [6403, 1980, 253, 655, 28, 281, 253, 1165, 6560, 32047, 826, 13549,
                    12610, 28, 665, 4161],
    # ChatML: system prompt + "What is 2+2?" + assistant header (special tokens on)
    "chat_math": [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519,
                  28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 216,
                  34, 27, 34, 47, 2, 198, 1, 520, 9531, 198],
}

# Fixed prompts for tiny byte-level models: bytes of short strings (ids < 256).
TINY_PROMPTS = {
    "one_token": list(b"A"),
    "hello": list(b"Hello, world!"),
    "pangram": list(b"The quick brown fox jumps over the lazy dog. " * 2),
}


# ----------------------------------------------------------------- running servelab
def run(cmd: list[str]) -> None:
    """Run a command; on failure print its output and raise."""
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        raise RuntimeError(f"command failed (exit {result.returncode}): {' '.join(cmd)}")


# MLA shape options passed through to `make-tiny-model --mla` when given.
MLA_SHAPE_OPTIONS = ("q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim")


def make_tiny_model(servelab: str, out: pathlib.Path, seed: int, weight_type: str,
                    untied: bool, mla: bool = False, mla_shape: dict | None = None) -> None:
    cmd = [servelab, "make-tiny-model", "--out", str(out), "--seed", str(seed),
           "--weight-type", weight_type]
    if untied:
        cmd.append("--untied")
    if mla:
        cmd.append("--mla")
        for name, value in (mla_shape or {}).items():
            if value is not None:
                cmd += ["--" + name.replace("_", "-"), str(value)]
    run(cmd)


def servelab_logits(servelab: str, model: str, tokens: list[int], vocab: int,
                    workdir: pathlib.Path) -> np.ndarray:
    """Run `servelab logits` and read its raw float32 [n_tokens x vocab] output."""
    out = workdir / "logits.f32"
    out.unlink(missing_ok=True)
    # Exact mode: fp32 activations, the numbers the oracle computes (the
    # commands' default, fast mode, rounds the activations to int8).
    run([servelab, "logits", "--model", model, "--cpu-kernels", "exact",
         "--tokens", ",".join(map(str, tokens)), "--out", str(out)])
    data = np.fromfile(out, dtype="<f4")
    expected = len(tokens) * vocab
    if data.size != expected:
        raise RuntimeError(f"servelab wrote {data.size} floats, expected "
                           f"{len(tokens)} x {vocab} = {expected}")
    return data.reshape(len(tokens), vocab).astype(np.float64)


# ----------------------------------------------------------------- comparing
def relative_errors(ours: np.ndarray, oracle: np.ndarray) -> np.ndarray:
    """Per position: max|ours - oracle| / max|oracle|. NaN/inf in ours counts as infinite error."""
    diff = np.abs(ours - oracle).max(axis=1)
    scale = np.abs(oracle).max(axis=1)
    errors = diff / np.maximum(scale, 1e-30)
    errors[~np.isfinite(ours).all(axis=1)] = np.inf
    return errors


def check_prompt(name: str, tokens: list[int], ours: np.ndarray, oracle: np.ndarray,
                 tolerance: float) -> bool:
    errors = relative_errors(ours, oracle)
    worst = int(np.argmax(errors))
    argmax_agree = int((ours.argmax(axis=1) == oracle.argmax(axis=1)).sum())
    ok = bool(errors[worst] <= tolerance)
    print(f"  {'ok  ' if ok else 'FAIL'} {name:<16} n={len(tokens):<3} "
          f"worst rel err {errors[worst]:.3e} at position {worst}; "
          f"argmax agrees {argmax_agree}/{len(tokens)}")
    if not ok:
        print(f"       tokens: {','.join(map(str, tokens))}")
    return ok


# ----------------------------------------------------------------- prompts
def random_prompts(rng: np.random.Generator, vocab: int, count: int, min_len: int,
                   max_len: int) -> dict[str, list[int]]:
    prompts = {}
    for i in range(count):
        length = int(rng.integers(min_len, max_len + 1))
        prompts[f"random_{i}"] = rng.integers(0, vocab, size=length).tolist()
    return prompts


def fixed_prompts(vocab: int, context: int, extra: list[str]) -> dict[str, list[int]]:
    """Built-in real prompts that fit this vocabulary (cut to the context length),
    plus any given with --tokens (used as they are)."""
    builtin = SMOLLM2_PROMPTS if vocab == 49152 else TINY_PROMPTS
    prompts = {k: v[:context] for k, v in builtin.items() if max(v) < vocab}
    for i, text in enumerate(extra):
        prompts[f"given_{i}"] = numpy_oracle.parse_tokens(text)
    return prompts


# ----------------------------------------------------------------- main
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servelab", required=True, help="path to the servelab binary")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="GGUF model to test")
    src.add_argument("--tiny", metavar="TYPE",
                     help="make a tiny random model with this weight type (f32, f16, bf16, "
                          "q8_0, q4_0, q4_1) and test it")
    p.add_argument("--untied", action="store_true", help="tiny model with its own output.weight")
    p.add_argument("--mla", action="store_true",
                   help="tiny model with multi-head latent attention (deepseek2, dense MLP)")
    for name in MLA_SHAPE_OPTIONS:
        p.add_argument("--" + name.replace("_", "-"), type=int, default=None, metavar="N",
                       help="with --mla: passed to make-tiny-model (default: its default)")
    p.add_argument("--tokens", action="append", default=[],
                   help="an extra prompt as comma-separated ids (repeatable)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for random prompts and the tiny model (default: from the clock)")
    p.add_argument("--n-random", type=int, default=3, help="number of random prompts")
    p.add_argument("--min-len", type=int, default=1, help="shortest random prompt")
    p.add_argument("--max-len", type=int, default=40, help="longest random prompt")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest allowed max|ours-oracle|/max|oracle| per position")
    args = p.parse_args(argv)
    mla_shape_given = any(getattr(args, name) is not None for name in MLA_SHAPE_OPTIONS)
    if mla_shape_given and not args.mla:
        p.error("the MLA shape options need --mla")
    if args.mla and not args.tiny:
        p.error("--mla needs --tiny (a real model says its architecture itself)")
    return args


def run_checks(args, model_path: str, workdir: pathlib.Path, seed: int) -> tuple[int, int]:
    """Compare every prompt; return (failed, total)."""
    oracle = numpy_oracle.OracleModel.load(model_path)
    vocab = oracle.config.vocab_size
    max_len = min(args.max_len, oracle.config.context_length)
    prompts = fixed_prompts(vocab, oracle.config.context_length, args.tokens)
    prompts.update(random_prompts(np.random.default_rng(seed), vocab, args.n_random,
                                  min(args.min_len, max_len), max_len))
    failed = 0
    for name, tokens in prompts.items():
        ours = servelab_logits(args.servelab, model_path, tokens, vocab, workdir)
        expected = oracle.forward(tokens)
        if not check_prompt(name, tokens, ours, expected, args.tolerance):
            failed += 1
    return failed, len(prompts)


def describe_tiny(args) -> str:
    what = f"tiny {args.tiny}"
    if args.mla:
        shape = [f"{name}={getattr(args, name)}" for name in MLA_SHAPE_OPTIONS
                 if getattr(args, name) is not None]
        what += " mla" + (f" ({', '.join(shape)})" if shape else "")
    return what + (" untied" if args.untied else "")


def main(argv=None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % (2**31)
    what = args.model if args.model else describe_tiny(args)
    print(f"numpy oracle e2e: {what}; seed {seed} (reproduce with --seed {seed}); "
          f"tolerance {args.tolerance:g}")
    if args.model and not pathlib.Path(args.model).is_file():
        print(f"SKIP: model file {args.model} not found (run tools/setup/fetch_model.py)")
        return SKIP

    with tempfile.TemporaryDirectory(prefix="servelab_oracle_") as tmp:
        workdir = pathlib.Path(tmp)
        model_path = args.model
        try:
            if args.tiny:
                model_path = str(workdir / f"tiny_{args.tiny}.gguf")
                make_tiny_model(args.servelab, pathlib.Path(model_path), seed, args.tiny,
                                args.untied, args.mla,
                                {name: getattr(args, name) for name in MLA_SHAPE_OPTIONS})
            failed, total = run_checks(args, model_path, workdir, seed)
        except RuntimeError as error:
            print(f"FAIL: {error} ({what}, seed {seed})")
            return 1

    verdict = "PASS" if failed == 0 else "FAIL"
    print(f"{verdict}: {total - failed}/{total} prompts within {args.tolerance:g} "
          f"({what}, seed {seed})")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
