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
  bandwidth     the share of a memory level's read rate that batch-1 decode
                streams as weights (weight bytes per token × tokens/s), against
                the level the weights live in: the smallest cache (sysfs) that
                holds the bytes a token reads, else DRAM. build/release/membw_probe
                measures the threads' read rate at that size and at 1 GiB (DRAM).
                A share of DRAM for weights that sit in L3 (SmolLM2-135M on a
                300 MiB L3) exceeds 100% and says nothing; a share above 100%
                of the chosen level is flagged as a wrong level.
  DRAM case     the same bandwidth share where it is DRAM's: a random model
                with Llama-3.2-1B's shapes in Q4_1 (about 770 MB), written on
                first use into build/dram_case/ by `servelab make-tiny-model`;
                batch-1 decode by `servelab bench` and llama-bench on that file,
                against the 1 GiB read rate (target 85%; llama.cpp users report
                84-91% of STREAM at batch 1). --no-dram-case skips it.

Every repetition runs every measurement of both engines, alternating which
goes first (A B, then B A), so a slow patch of a shared machine hits both;
each figure is the median over repetitions. Prints every figure with its
ratio and target; --out writes every sample as JSON.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TARGETS = {"decode-1": 1.2, "prefill-512": 1.2, "decode-16": 1.2}
BANDWIDTH_TARGET = 0.70
DRAM_CASE_TARGET = 0.85
DRAM_PROBE_MIB = 1024  # far beyond any cache: the probe reads DRAM
# Llama-3.2-1B's shapes (its config.json): what a 1B model streams per token.
DRAM_CASE_SHAPE = {"layers": 16, "dim": 2048, "heads": 32, "kv-heads": 8, "ffn-dim": 8192,
                   "vocab": 128256, "context": 2048}
DRAM_CASE_DIR = ROOT / "build/dram_case"


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
        self.weight_bytes_per_token = None  # one copy: what a decode step reads
        self.weight_bytes_held = None       # fast mode on VNNI holds the blocks twice

    def bench(self, *extra: str) -> dict:
        command = [str(self.binary), "-q", "bench", "--model", str(self.model), "--threads",
                   str(self.threads), "--repeats", "1", "--json", *extra]
        if self.mode is not None:
            command += ["--cpu-kernels", self.mode]
        return json.loads(run_json(command, "servelab bench"))

    def decode_1(self, gen: int) -> float:
        result = self.bench("--prompt-tokens", "1", "--gen-tokens", str(gen))
        self.weight_bytes_per_token = result.get("weight_bytes_per_token")
        self.weight_bytes_held = result.get("weight_bytes_held")
        return result["decode_tokens_per_s"]

    def prefill(self, prompt: int) -> float:
        return self.bench("--prompt-tokens", str(prompt), "--gen-tokens", "1")["prefill_tokens_per_s"]

    def decode_batched(self, prompt: int, gen: int, sequences: int) -> float:
        return self.bench("--prompt-tokens", str(prompt), "--gen-tokens", str(gen), "-n",
                          str(sequences))["decode_tokens_per_s"]


# --- Where the weights live, and how fast that level reads -------------------------------


def parse_cache_size(text: str) -> int:
    """sysfs writes a cache's size as "32768K" (or "1M")."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def cache_levels(threads: int) -> list[tuple[str, int, int]]:
    """(name, bytes, instances) of L2 and L3 as the decode threads see them.

    Each instance (a core's L2; a socket's or CCX's L3) holds its own lines,
    so the threads together use every distinct instance among the CPUs they
    may run on: the size is one instance's times that count, as lscpu adds.
    """
    cpus = sorted(os.sched_getaffinity(0))[:max(threads, 1)]
    sizes: dict[int, int] = {}
    instances: dict[int, set[str]] = {}
    for cpu in cpus:
        for index in Path(f"/sys/devices/system/cpu/cpu{cpu}/cache").glob("index*"):
            try:
                level = int((index / "level").read_text())
                kind = (index / "type").read_text().strip()
                size = parse_cache_size((index / "size").read_text())
                shared = (index / "shared_cpu_list").read_text().strip()
            except (OSError, ValueError, KeyError):
                continue
            if level in (2, 3) and kind in ("Unified", "Data"):
                sizes[level] = size
                instances.setdefault(level, set()).add(shared)
    return [(f"L{level}", sizes[level] * len(instances[level]), len(instances[level]))
            for level in sorted(sizes)]


def memory_level(bytes_per_token: int, caches: list[tuple[str, int, int]]) -> str:
    """The smallest level that holds what one token reads, else DRAM.

    What a step touches is what competes for a cache: fast mode's second copy
    of the weights is never read in decode, so it takes no cache lines. A
    sweep that fits stays resident from token to token; one that does not
    evicts its own lines before it comes back to them (a cyclic sweep larger
    than an LRU cache misses on every line), so it all comes from DRAM.
    """
    for name, size, _ in caches:
        if bytes_per_token <= size:
            return name
    return "DRAM"


def working_set_mib(bytes_per_token: int) -> int:
    """The probe's buffer for a working set: its size in MiB, rounded up, at most 1 GiB."""
    return min(DRAM_PROBE_MIB, max(1, math.ceil(bytes_per_token / (1 << 20))))


def membw(binary: Path, threads: int, mib: int) -> float:
    out = run_json([str(binary), "--threads", str(threads), "--mib", str(mib), "--passes", "5"],
                   "membw_probe")
    return json.loads(out)["median_gb_per_s"]


# --- Measuring, interleaved ---------------------------------------------------------------


def run_interleaved(engines: dict[str, object], figures: dict[str, Callable],
                    repetitions: int, after_each: Callable[[Callable], None],
                    what: str) -> dict[str, list[float]]:
    """Every figure of every engine per repetition, the engines' order alternating."""
    samples: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    names = list(engines)
    for repetition in range(repetitions):
        log(f"{what}: repetition {repetition + 1}/{repetitions}")
        order = names if repetition % 2 == 0 else list(reversed(names))
        for figure, measure in figures.items():
            for name in order:
                add(f"{name} {figure}", measure(engines[name]))
        after_each(add)
    return samples


def probe_both(membw_bin: Path, threads: int, servelab: Servelab) -> Callable:
    """A repetition's probes: at the size one token reads (known once servelab
    has decoded) and at 1 GiB, the DRAM rate."""
    def probe(add: Callable[[str, float], None]) -> None:
        sizes = {DRAM_PROBE_MIB}
        if servelab.weight_bytes_per_token:
            sizes.add(working_set_mib(servelab.weight_bytes_per_token))
        for mib in sorted(sizes):
            add(f"bandwidth GB/s at {mib} MiB", membw(membw_bin, threads, mib))
    return probe


# --- The weight stream's share of its level's read rate ----------------------------------


@dataclass
class Stream:
    """One model's batch-1 weight stream and the level it reads from."""
    bytes_per_token: int
    bytes_held: int | None
    level: str
    set_mib: int
    set_gb_per_s: float   # the probe at the size a token reads
    dram_gb_per_s: float  # the probe at 1 GiB

    def level_gb_per_s(self) -> float:
        return self.dram_gb_per_s if self.level == "DRAM" else self.set_gb_per_s

    def share(self, tokens_per_s: float) -> float:
        return self.bytes_per_token * tokens_per_s / 1e9 / self.level_gb_per_s()


def make_stream(servelab: Servelab, median: dict[str, float],
                caches: list[tuple[str, int, int]]) -> Stream:
    streamed = servelab.weight_bytes_per_token
    mib = working_set_mib(streamed)
    return Stream(streamed, servelab.weight_bytes_held, memory_level(streamed, caches), mib,
                  median[f"bandwidth GB/s at {mib} MiB"],
                  median[f"bandwidth GB/s at {DRAM_PROBE_MIB} MiB"])


def describe_caches(caches: list[tuple[str, int, int]]) -> str:
    if not caches:
        return "no cache sizes in sysfs"
    return ", ".join(f"{name} {size / (1 << 20):g} MiB ({count} instance{'s' * (count > 1)})"
                     for name, size, count in caches)


def print_stream_details(stream: Stream, caches: list[tuple[str, int, int]],
                         threads: int) -> None:
    held = ""
    if stream.bytes_held and stream.bytes_held > stream.bytes_per_token:
        held = (f"; {stream.bytes_held / 1e6:.1f} MB held: fast mode keeps the GGUF blocks "
                f"beside the repacked copy it reads")
    print(f"  ({stream.bytes_per_token / 1e6:.1f} MB of weights read per token{held})")
    print(f"  ({describe_caches(caches)}: the weights a token reads live in {stream.level})")
    print(f"  (read rate, membw_probe, {threads} threads: {stream.set_gb_per_s:.2f} GB/s at "
          f"{stream.set_mib} MiB, what a token reads; {stream.dram_gb_per_s:.2f} GB/s at "
          f"{DRAM_PROBE_MIB} MiB, DRAM)")


def warn_if_impossible(shares: dict[str, float], level: str) -> None:
    """A stream cannot beat the level it reads from: above 100%, the level is wrong."""
    over = [name for name, share in shares.items() if share > 1.0]
    if over:
        print(f"  WARNING: {', '.join(over)} above 100% of the {level} read rate: decode "
              f"cannot read faster than the level it reads from, so the weights are not "
              f"(only) in {level}; the level was chosen wrongly and the share means nothing")


# --- The DRAM-bound case -----------------------------------------------------------------


def dram_case_model(servelab_bin: Path) -> Path:
    """The DRAM case's GGUF, written on first use (a minute or two); its name
    holds every parameter, so a changed shape writes a new file."""
    shape = "-".join(f"{key}{value}" for key, value in DRAM_CASE_SHAPE.items())
    path = DRAM_CASE_DIR / f"random-llama-3.2-1b-shapes-{shape}-q4_1-seed1.gguf"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    log(f"writing the DRAM case's model {path.name} (about 770 MB)")
    flags = [x for key, value in DRAM_CASE_SHAPE.items() for x in (f"--{key}", str(value))]
    run_json([str(servelab_bin), "-q", "make-tiny-model", "-o", str(partial), "--seed", "1",
              "--weight-type", "q4_1", *flags], "servelab make-tiny-model")
    partial.rename(path)
    return path


def measure_dram_case(args: argparse.Namespace, peers: Path,
                      caches: list[tuple[str, int, int]]) -> dict:
    """Batch-1 decode of the DRAM case by both engines, interleaved, with the probes."""
    model = dram_case_model(args.servelab_bin)
    engines = {"llama.cpp": LlamaCpp(peers, model, args.threads),
               "servelab": Servelab(args.servelab_bin, model, args.threads, None)}
    samples = run_interleaved(
        engines, {"decode-1": lambda e: e.decode_1(args.gen_tokens)},
        args.dram_case_repetitions, probe_both(args.membw_bin, args.threads, engines["servelab"]),
        "DRAM case")
    median = {name: statistics.median(values) for name, values in samples.items()}
    stream = make_stream(engines["servelab"], median, caches)
    return {"model": model, "samples": samples, "median": median, "stream": stream}


def print_dram_case(case: dict, args: argparse.Namespace,
                    caches: list[tuple[str, int, int]]) -> dict[str, float]:
    median, stream = case["median"], case["stream"]
    theirs, ours = median["llama.cpp decode-1"], median["servelab decode-1"]
    shares = {"llama.cpp": stream.share(theirs), "servelab": stream.share(ours)}
    verdict = {name: "met" if share >= DRAM_CASE_TARGET else "MISSED"
               for name, share in shares.items()}
    shape = ", ".join(f"{key} {value}" for key, value in DRAM_CASE_SHAPE.items())
    print(f"\nDRAM case: {case['model'].name}\n  random weights, Llama-3.2-1B's shapes ({shape}), "
          f"Q4_1; median of {args.dram_case_repetitions} interleaved repetitions")
    print(f"{'batch-1 decode tok/s (tg' + str(args.gen_tokens) + ')':<34} {theirs:>10.1f} "
          f"{ours:>10.1f} {ours / theirs:>6.2f}x")
    print(f"{'batch-1 weight stream / ' + stream.level + ' read':<34} {shares['llama.cpp']:>10.0%} "
          f"{shares['servelab']:>10.0%} {'':>7}  >= {DRAM_CASE_TARGET:.0%} {verdict['servelab']} "
          f"(llama.cpp {verdict['llama.cpp']}; its users report 84-91% of STREAM at batch 1)")
    print_stream_details(stream, caches, args.threads)
    warn_if_impossible(shares, stream.level)
    if stream.level != "DRAM":
        print(f"  WARNING: this machine's caches hold the DRAM case's weights; it is not DRAM-bound here")
    return shares


# --- The report --------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
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
    parser.add_argument("--no-dram-case", action="store_true",
                        help="skip the DRAM-bound case (a random Llama-3.2-1B-shaped Q4_1 model)")
    parser.add_argument("--dram-case-repetitions", type=int, default=3,
                        help="interleaved repetitions of the DRAM case")
    parser.add_argument("--out", type=Path, default=ROOT / "build/cpu_peer_report.json")
    args = parser.parse_args()
    for value, flag in [(args.threads, "--threads"), (args.repetitions, "--repetitions"),
                        (args.dram_case_repetitions, "--dram-case-repetitions"),
                        (args.gen_tokens, "--gen-tokens")]:
        if value < 1:
            parser.error(f"{flag} must be at least 1")
    for path, what in [(args.model, "model (make model)"),
                       (args.servelab_bin, "servelab (make build)"),
                       (args.membw_bin, "membw_probe (make build)")]:
        if not path.is_file():
            parser.error(f"no {what} at {path}")
    return args


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def print_peer_table(args: argparse.Namespace, median: dict[str, float]) -> dict[str, float]:
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
    return ratios


def print_stream_row(stream: Stream, median: dict[str, float], names: list[str],
                     args: argparse.Namespace, caches: list[tuple[str, int, int]]) -> dict[str, float]:
    """The default model's weight stream as a share of the level it lives in.
    llama.cpp streams about the same bytes per token (the same GGUF tensors)."""
    shares = {name: stream.share(median[f"{name} decode-1"]) for name in names}
    verdict = "met" if shares["servelab"] >= BANDWIDTH_TARGET else "MISSED"
    label = f"batch-1 weight stream / {stream.level} read"
    print(f"{label:<34} {shares['llama.cpp']:>10.0%} {shares['servelab']:>10.0%} {'':>7}  "
          f">= {BANDWIDTH_TARGET:.0%} {verdict}"
          + (f"  {shares['servelab exact']:>7.0%}" if "servelab exact" in shares else ""))
    print_stream_details(stream, caches, args.threads)
    warn_if_impossible(shares, stream.level)
    return shares


def main() -> int:
    args = parse_args()
    peers = ensure_peers()
    commit = (peers.parent / "commit").read_text().strip() if (peers.parent / "commit").exists() else "?"
    flags = (peers.parent / "stamp").read_text().strip() if (peers.parent / "stamp").exists() else "?"
    caches = cache_levels(args.threads)

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
    samples = run_interleaved(engines, figures, args.repetitions,
                              probe_both(args.membw_bin, args.threads, engines["servelab"]),
                              args.model.name)
    dram_case = None if args.no_dram_case else measure_dram_case(args, peers, caches)

    median = {name: statistics.median(values) for name, values in samples.items()}
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cpu = cpu_name()
    print(f"\n{args.model.name}, {args.threads} threads, {cpu}, {date}; median of "
          f"{args.repetitions} interleaved repetitions")
    print(f"llama.cpp {commit} (llama-cpp-python sdist), built by tools/build_peers.sh")
    ratios = print_peer_table(args, median)
    stream = make_stream(engines["servelab"], median, caches)
    shares = print_stream_row(stream, median, list(engines), args, caches)
    dram_shares = print_dram_case(dram_case, args, caches) if dram_case else {}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": date, "cpu": cpu, "model": str(args.model), "threads": args.threads,
        "repetitions": args.repetitions, "llama_cpp_commit": commit, "llama_cpp_build": flags,
        "caches": [{"level": n, "bytes": b, "instances": c} for n, b, c in caches],
        "samples": samples, "median": median, "ratios": ratios,
        "weight_bytes_per_token": stream.bytes_per_token, "weight_bytes_held": stream.bytes_held,
        "memory_level": stream.level, "bandwidth_share": shares,
        "dram_case": None if not dram_case else {
            "model": str(dram_case["model"]), "samples": dram_case["samples"],
            "median": dram_case["median"], "memory_level": dram_case["stream"].level,
            "weight_bytes_per_token": dram_case["stream"].bytes_per_token,
            "weight_bytes_held": dram_case["stream"].bytes_held, "bandwidth_share": dram_shares},
    }, indent=1))
    log(f"every sample: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
