#!/usr/bin/env python3
"""make_traces.py — synthetic request traces for Labs 4, 5 and 11 (data/traces/).

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

Prefix-sharing traces (Lab 11, RadixAttention) add a "segments" field:
  {"id", "prompt_tokens", "output_tokens", "segments": [[segment_id, length], ...]}
The prompt is the segments in order; their lengths sum to prompt_tokens. The
C++ side draws each segment's token ids from a generator seeded by the
segment id alone, so two prompts share a token prefix exactly as far as their
segment lists agree. A segment id has one length wherever it appears, and
each trace takes its ids from its own range (multi_turn 1,000,000+, few_shot
2,000,000+, branching 3,000,000+, no_sharing 4,000,000+), so no two traces
share by accident. Each holds about 23k-34k prompt tokens in all, small
enough for the CPU benchmark (SmolLM2-135M on 2 cores).
  multi_turn.jsonl   24 conversations x 4 turns = 96 requests, ordered by
      turn, then conversation. Turn t's prompt is [system][user 1][answer 1]
      ... [answer t-1][user t]: one 64-token system prompt for all, user
      turns LogNormal(mean 40, sigma 0.5) clipped to [8, 128], outputs
      LogNormal(mean 48, sigma 0.4) clipped to [8, 128]; answer k has the
      length of turn k's output. The benchmark samples its outputs, so the
      answer's ids are not the ones the model generated: only the previous
      turn's prompt can be reused, not its answer.
  few_shot.jsonl     96 requests: a 96-token instruction, then 4 of a pool of
      8 examples (LogNormal(mean 64, sigma 0.3) clipped to [32, 128], one
      length per example), then the request's own question (LogNormal(mean
      32, sigma 0.5) clipped to [8, 96]). The examples come from one of 6
      pre-drawn orderings (ordered 4-subsets), ordering k with probability
      proportional to 1/(k+1). Outputs LogNormal(mean 24, sigma 0.4) clipped
      to [4, 64].
  branching.jsonl    6 problems, each a root context (LogNormal(mean 288,
      sigma 0.2) clipped to [144, 432]) with 4 first-level thoughts
      (LogNormal(mean 48, sigma 0.3) clipped to [16, 96]), each with 3
      second-level thoughts (LogNormal(mean 32, sigma 0.3) clipped to [8,
      64]); one request per thought: [root][t_i] or [root][t_i][t_ij], so
      6 x (4 + 12) = 96 requests. Outputs LogNormal(mean 32, sigma 0.4)
      clipped to [8, 96]. Shuffled so the trees interleave, with each
      second-level request after its parent.
  no_sharing.jsonl   96 requests, each prompt one segment of its own
      (LogNormal(mean 360, sigma 0.5) clipped to [64, 1024], about the
      branching trace's mean prompt), outputs LogNormal(mean 32, sigma 0.4)
      clipped to [8, 96]: the control, nothing to share.
For each of these the generator also prints the shareable prompt tokens: for
each request, the longest prefix, in whole agreeing segments, that it shares
with some earlier request in trace order.

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

# The prefix-sharing traces. Each is kept under about 40k prompt tokens in
# all, since the CPU benchmark has to prefill every one of them without a
# cache: hence few_shot's 96 requests (160 would be ~60k tokens) and
# branching's 288-token mean root (512 would be ~56k, and the trace's mean
# prompt would no longer match no_sharing's).
MULTI_TURN = {"conversations": 24, "turns": 4, "seed": 13, "id_base": 1_000_000,
              "system": 64,
              "user": {"mean": 40.0, "sigma": 0.5, "min": 8, "max": 128},
              "output": {"mean": 48.0, "sigma": 0.4, "min": 8, "max": 128}}
FEW_SHOT = {"requests": 96, "seed": 17, "id_base": 2_000_000,
            "instruction": 96, "pool": 8, "shots": 4, "orderings": 6,
            "example": {"mean": 64.0, "sigma": 0.3, "min": 32, "max": 128},
            "question": {"mean": 32.0, "sigma": 0.5, "min": 8, "max": 96},
            "output": {"mean": 24.0, "sigma": 0.4, "min": 4, "max": 64}}
BRANCHING = {"roots": 6, "children": 4, "grandchildren": 3, "seed": 19, "id_base": 3_000_000,
             "root": {"mean": 288.0, "sigma": 0.2, "min": 144, "max": 432},
             "thought1": {"mean": 48.0, "sigma": 0.3, "min": 16, "max": 96},
             "thought2": {"mean": 32.0, "sigma": 0.3, "min": 8, "max": 64},
             "output": {"mean": 32.0, "sigma": 0.4, "min": 8, "max": 96}}
NO_SHARING = {"requests": 96, "seed": 23, "id_base": 4_000_000,
              "prompt": {"mean": 360.0, "sigma": 0.5, "min": 64, "max": 1024},
              "output": {"mean": 32.0, "sigma": 0.4, "min": 8, "max": 96}}
# Each trace's segment ids lie in [id_base, id_base + ID_RANGE).
ID_RANGE = 1_000_000


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


class SegmentIds:
    """Hands out a trace's segment ids in order from its own range and
    remembers each one's length (the C++ side keys the tokens on the id alone)."""

    def __init__(self, base):
        self.base = base
        self.next = base
        self.lengths = {}

    def new(self, length):
        segment = self.next
        self.next += 1
        assert segment < self.base + ID_RANGE, "segment id range exhausted"
        self.lengths[segment] = int(length)
        return segment

    def seg(self, segment):
        return [segment, self.lengths[segment]]


def segment_record(i, segments, output):
    return {"id": i, "prompt_tokens": sum(length for _, length in segments),
            "output_tokens": int(output), "segments": segments}


def multi_turn():
    rng = np.random.default_rng(MULTI_TURN["seed"])
    convs, turns = MULTI_TURN["conversations"], MULTI_TURN["turns"]
    users = lognormal_lengths(rng, MULTI_TURN["user"], convs * turns).reshape(convs, turns)
    outputs = lognormal_lengths(rng, MULTI_TURN["output"], convs * turns).reshape(convs, turns)
    ids = SegmentIds(MULTI_TURN["id_base"])
    system = ids.new(MULTI_TURN["system"])
    user = [[ids.new(users[c, t]) for t in range(turns)] for c in range(convs)]
    # Answer t is written back into turn t+1's prompt with the length of
    # turn t's output (the last turn's answer is never sent back).
    answer = [[ids.new(outputs[c, t]) for t in range(turns - 1)] for c in range(convs)]
    records = []
    # By turn, then conversation: a turn's previous prompt has been admitted
    # (and, with a prefix cache, computed) before the turn itself.
    for t in range(turns):
        for c in range(convs):
            segments = [ids.seg(system)]
            for k in range(t):
                segments += [ids.seg(user[c][k]), ids.seg(answer[c][k])]
            segments.append(ids.seg(user[c][t]))
            records.append(segment_record(len(records), segments, outputs[c, t]))
    return records


def few_shot():
    rng = np.random.default_rng(FEW_SHOT["seed"])
    n = FEW_SHOT["requests"]
    ids = SegmentIds(FEW_SHOT["id_base"])
    instruction = ids.new(FEW_SHOT["instruction"])
    examples = [ids.new(length)
                for length in lognormal_lengths(rng, FEW_SHOT["example"], FEW_SHOT["pool"])]
    # A few fixed orderings rather than a fresh one per request: the order
    # still varies, but enough requests agree on their first examples for a
    # prefix cache to have something to find.
    orderings = [rng.choice(FEW_SHOT["pool"], size=FEW_SHOT["shots"], replace=False)
                 for _ in range(FEW_SHOT["orderings"])]
    weights = np.array([1.0 / (k + 1) for k in range(FEW_SHOT["orderings"])])
    picks = rng.choice(FEW_SHOT["orderings"], size=n, p=weights / weights.sum())
    questions = lognormal_lengths(rng, FEW_SHOT["question"], n)
    outputs = lognormal_lengths(rng, FEW_SHOT["output"], n)
    records = []
    for i in range(n):
        segments = [ids.seg(instruction)]
        segments += [ids.seg(examples[e]) for e in orderings[picks[i]]]
        segments.append(ids.seg(ids.new(questions[i])))
        records.append(segment_record(i, segments, outputs[i]))
    return records


def branching():
    rng = np.random.default_rng(BRANCHING["seed"])
    roots, children, grandchildren = BRANCHING["roots"], BRANCHING["children"], BRANCHING["grandchildren"]
    ids = SegmentIds(BRANCHING["id_base"])
    root_lengths = lognormal_lengths(rng, BRANCHING["root"], roots)
    t1_lengths = lognormal_lengths(rng, BRANCHING["thought1"], roots * children)
    t2_lengths = lognormal_lengths(rng, BRANCHING["thought2"], roots * children * grandchildren)
    # Requests in tree order: each level-1 thought, then its level-2 thoughts.
    # parent[j] is the index of request j's level-1 parent, or None.
    prompts, parent = [], []
    for r in range(roots):
        root = ids.seg(ids.new(root_lengths[r]))
        for c in range(children):
            t1 = ids.seg(ids.new(t1_lengths[r * children + c]))
            prompts.append([root, t1])
            parent.append(None)
            first = len(prompts) - 1
            for g in range(grandchildren):
                t2 = ids.seg(ids.new(t2_lengths[(r * children + c) * grandchildren + g]))
                prompts.append([root, t1, t2])
                parent.append(first)
    outputs = lognormal_lengths(rng, BRANCHING["output"], len(prompts))
    # Shuffle so FCFS interleaves the trees (what a cache-aware policy can
    # reorder); then a level-1 request that landed after one of its children
    # swaps places with its earliest child, so every child follows its parent.
    position = rng.permutation(len(prompts))
    for j in range(len(prompts)):
        if parent[j] is None:
            kids = [k for k in range(len(prompts)) if parent[k] == j]
            earliest = min(kids, key=lambda k: position[k])
            if position[earliest] < position[j]:
                position[j], position[earliest] = position[earliest], position[j]
    order = np.argsort(position)
    return [segment_record(i, prompts[j], outputs[j]) for i, j in enumerate(order)]


def no_sharing():
    rng = np.random.default_rng(NO_SHARING["seed"])
    n = NO_SHARING["requests"]
    prompts = lognormal_lengths(rng, NO_SHARING["prompt"], n)
    outputs = lognormal_lengths(rng, NO_SHARING["output"], n)
    ids = SegmentIds(NO_SHARING["id_base"])
    return [segment_record(i, [ids.seg(ids.new(p))], o)
            for i, (p, o) in enumerate(zip(prompts, outputs))]


def check_segments(name, records, base):
    """The invariants the C++ side relies on: the segments add up to the
    prompt, ids stay in the trace's own range, and one id has one length."""
    lengths = {}
    for r in records:
        assert list(r) == ["id", "prompt_tokens", "output_tokens", "segments"], name
        assert sum(length for _, length in r["segments"]) == r["prompt_tokens"], (name, r["id"])
        for segment, length in r["segments"]:
            assert base <= segment < base + ID_RANGE < 2 ** 40, (name, segment)
            assert length >= 1, (name, segment)
            assert lengths.setdefault(segment, length) == length, (name, segment)
        assert r["output_tokens"] >= 1, (name, r["id"])


def shareable_tokens(records):
    """Prompt tokens that are a prefix of some earlier request's prompt: for
    each request, the longest run of leading segments that agrees with an
    earlier request's, in tokens."""
    seen = set()
    total = 0
    for r in records:
        segments = [tuple(s) for s in r["segments"]]
        shared = 0
        for k in range(1, len(segments) + 1):
            if tuple(segments[:k]) not in seen:
                break
            shared = sum(length for _, length in segments[:k])
        total += shared
        seen.update(tuple(segments[:k]) for k in range(1, len(segments) + 1))
    return total


def render(records):
    return "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in records)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "data", "traces"))
    parser.add_argument("--check", action="store_true", help="fail if the committed traces differ")
    args = parser.parse_args()
    traces = {"sharegpt_like.jsonl": sharegpt_like(), "shared_system_prompt.jsonl": shared_system_prompt(),
              "fixed_length.jsonl": fixed_length(), "long_tail.jsonl": long_tail()}
    segment_traces = {"multi_turn.jsonl": (multi_turn(), MULTI_TURN["id_base"]),
                      "few_shot.jsonl": (few_shot(), FEW_SHOT["id_base"]),
                      "branching.jsonl": (branching(), BRANCHING["id_base"]),
                      "no_sharing.jsonl": (no_sharing(), NO_SHARING["id_base"])}
    for name, (records, base) in segment_traces.items():
        check_segments(name, records, base)
        traces[name] = records
    status = 0
    for name, records in traces.items():
        path = os.path.join(args.out, name)
        text = render(records)
        prompt = np.mean([r["prompt_tokens"] for r in records])
        output = np.mean([r["output_tokens"] for r in records])
        summary = f"{name}: {len(records)} requests, mean prompt {prompt:.1f}, mean output {output:.1f} tokens"
        if name in segment_traces:
            total = sum(r["prompt_tokens"] for r in records)
            shareable = shareable_tokens(records)
            summary += (f"; {total} prompt tokens, {shareable} shareable "
                        f"({100.0 * shareable / total:.1f}%)")
        if args.check:
            try:
                with open(path) as f:
                    same = f.read() == text
            except FileNotFoundError:
                same = False
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
