#!/usr/bin/env python3
"""make_traces.py — synthetic request traces for Labs 4 and 5 (data/traces/).

Real serving traces (ShareGPT conversations) cannot be shipped here, so these
are drawn from distributions with the same shape: request lengths are
log-normal (long right tail), fitted to the means the vLLM paper reports for
ShareGPT (Kwon et al., 2023, Fig. 11: 161 input and 338 output tokens on
average; its text: ShareGPT has 8.4x longer prompts and 5.8x longer outputs
than Alpaca). Every request fits a 2048-token context, as in the paper's
OPT models, so "static reservation" can reserve 2048 slots for each.

Traces (one JSON object per line):
  sharegpt_like.jsonl        {"id", "prompt_tokens", "output_tokens"}
      1000 requests. prompt ~ LogNormal(mean 161, sigma 1.0), output ~
      LogNormal(mean 362, sigma 0.9), each rounded and clipped to [4, 1024].
      Clipping the long tail lowers the mean, so the output distribution's
      mean is set above 338 to land near it; the realized means are printed
      and recorded in data/traces/README.md.
  shared_system_prompt.jsonl {"id", "prefix_group", "prefix_tokens",
                              "prompt_tokens", "output_tokens"}
      200 requests built from 4 system prompts of 96, 192, 320 and 512
      tokens; request i picks system prompt g with probability proportional
      to 1/(g+1) (a few popular prompts), then adds its own user turn
      (LogNormal mean 48, sigma 0.6, clipped to [4, 256]) and asks for
      LogNormal(mean 64, sigma 0.6) output tokens, clipped to [4, 256].
      The first prefix_tokens of two requests with the same prefix_group
      are the same tokens; `servelab replay` turns the lengths into ids.
  fixed_length.jsonl         {"id", "prompt_tokens", "output_tokens"}
      256 requests, every one 128 prompt and 128 output tokens: no length
      variance, so static batching wastes nothing on it (the control case).
  long_tail.jsonl            {"id", "prompt_tokens", "output_tokens"}
      256 requests: prompt ~ LogNormal(mean 128, sigma 0.5) clipped to
      [8, 512]; output short for most and very long for a few: with
      probability 0.9 LogNormal(mean 48, sigma 0.5), else LogNormal(mean
      768, sigma 0.3), clipped to [4, 1536]. A batch that waits for its
      slowest request waits for one of the few long ones.

Usage: make_traces.py [--out data/traces] [--check]
  --check regenerates in memory and fails if the committed files differ
  (they are deterministic: numpy's PCG64 with fixed seeds).
"""
import argparse
import json
import os
import sys

import numpy as np

SHAREGPT = {"requests": 1000, "seed": 2023,
            "prompt": {"mean": 161.0, "sigma": 1.0, "min": 4, "max": 1024},
            "output": {"mean": 362.0, "sigma": 0.9, "min": 4, "max": 1024}}
FIXED = {"requests": 256, "prompt": 128, "output": 128}
LONG_TAIL = {"requests": 256, "seed": 7,
             "prompt": {"mean": 128.0, "sigma": 0.5, "min": 8, "max": 512},
             "short": {"mean": 48.0, "sigma": 0.5, "min": 4, "max": 1536},
             "long": {"mean": 768.0, "sigma": 0.3, "min": 4, "max": 1536},
             "long_fraction": 0.1}
SHARED = {"requests": 200, "seed": 11, "system_prompts": [96, 192, 320, 512],
          "user": {"mean": 48.0, "sigma": 0.6, "min": 4, "max": 256},
          "output": {"mean": 64.0, "sigma": 0.6, "min": 4, "max": 256}}


def lognormal_lengths(rng, spec, count):
    """Lengths with E[X] = spec['mean'] before clipping: mu = ln(mean) - sigma^2 / 2."""
    mu = np.log(spec["mean"]) - spec["sigma"] ** 2 / 2
    values = np.rint(rng.lognormal(mu, spec["sigma"], count))
    return np.clip(values, spec["min"], spec["max"]).astype(int)


def sharegpt_like():
    rng = np.random.default_rng(SHAREGPT["seed"])
    n = SHAREGPT["requests"]
    prompts = lognormal_lengths(rng, SHAREGPT["prompt"], n)
    outputs = lognormal_lengths(rng, SHAREGPT["output"], n)
    return [{"id": i, "prompt_tokens": int(p), "output_tokens": int(o)}
            for i, (p, o) in enumerate(zip(prompts, outputs))]


def shared_system_prompt():
    rng = np.random.default_rng(SHARED["seed"])
    n = SHARED["requests"]
    systems = SHARED["system_prompts"]
    weights = np.array([1.0 / (g + 1) for g in range(len(systems))])
    groups = rng.choice(len(systems), size=n, p=weights / weights.sum())
    users = lognormal_lengths(rng, SHARED["user"], n)
    outputs = lognormal_lengths(rng, SHARED["output"], n)
    return [{"id": i, "prefix_group": int(g), "prefix_tokens": systems[g],
             "prompt_tokens": int(systems[g] + u), "output_tokens": int(o)}
            for i, (g, u, o) in enumerate(zip(groups, users, outputs))]


def fixed_length():
    return [{"id": i, "prompt_tokens": FIXED["prompt"], "output_tokens": FIXED["output"]}
            for i in range(FIXED["requests"])]


def long_tail():
    rng = np.random.default_rng(LONG_TAIL["seed"])
    n = LONG_TAIL["requests"]
    prompts = lognormal_lengths(rng, LONG_TAIL["prompt"], n)
    short = lognormal_lengths(rng, LONG_TAIL["short"], n)
    long = lognormal_lengths(rng, LONG_TAIL["long"], n)
    is_long = rng.random(n) < LONG_TAIL["long_fraction"]
    outputs = np.where(is_long, long, short)
    return [{"id": i, "prompt_tokens": int(p), "output_tokens": int(o)}
            for i, (p, o) in enumerate(zip(prompts, outputs))]


def render(records):
    return "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in records)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data", "traces"))
    parser.add_argument("--check", action="store_true", help="fail if the committed traces differ")
    args = parser.parse_args()
    traces = {"sharegpt_like.jsonl": sharegpt_like(), "shared_system_prompt.jsonl": shared_system_prompt(),
              "fixed_length.jsonl": fixed_length(), "long_tail.jsonl": long_tail()}
    status = 0
    for name, records in traces.items():
        path = os.path.join(args.out, name)
        text = render(records)
        prompt = np.mean([r["prompt_tokens"] for r in records])
        output = np.mean([r["output_tokens"] for r in records])
        summary = f"{name}: {len(records)} requests, mean prompt {prompt:.1f}, mean output {output:.1f} tokens"
        if args.check:
            with open(path) as f:
                same = f.read() == text
            print(("ok   " if same else "DIFF ") + summary)
            status |= 0 if same else 1
        else:
            os.makedirs(args.out, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print("wrote " + summary)
    return status


if __name__ == "__main__":
    sys.exit(main())
