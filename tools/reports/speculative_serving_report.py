#!/usr/bin/env python3
"""speculative_serving_report.py — does `serve --speculate` pay, through the server, at 1 client?

Speculative decoding (Lab 6) as a user of the server meets it (chapter
11.7). It starts `servelab serve` once per arm — plain, and `--speculate K
--drafter ngram` for each --k — on the same model and threads, and sends
each arm the prompts of data/prompts/speculative.json (each list a
workload: "repetitive" copies much of the prompt, "open" does not) as chat
requests through the official `openai` client, one at a time, greedy,
exactly --max-tokens tokens each (min_tokens = max_tokens, ignore_eos).
Rounds interleave the arms (plain, K=2, K=4, then the reverse order), so a
slow patch of a shared machine hits every arm; the servers not measured
sleep.

Per workload and arm it prints decode tokens/s (output tokens over the time
from the first to the last streamed token, summed over the prompts), the
ratio to plain decoding (median of the rounds' ratios), and the drafts'
acceptance from /metrics. Greedy speculation must not change a token: a
text that differs from the plain arm's is an error, not a result.

Usage: .venv/bin/python tools/reports/speculative_serving_report.py [--k 2 4] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def log(message: str) -> None:
    print(f"[spec-serve] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `servelab serve`, stopped (SIGSTOP) while another arm is measured."""

    def __init__(self, binary: str, model: str, threads: int, extra: list[str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [binary, "-q", "serve", "--model", model, "--port", str(self.port),
             "--served-model-name", "model", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                break
            except OSError:
                if self.process.poll() is not None:
                    sys.exit(f"servelab serve {' '.join(extra)} exited: "
                             f"{self.process.stderr.read()[-2000:]}")
                time.sleep(0.2)
        else:
            sys.exit("servelab serve did not answer /health within 120 s")
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", timeout=600)

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self) -> None:
        self.resume()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def run_prompt(server: Server, prompt: str, max_tokens: int) -> tuple[str, int, float]:
    """One streamed chat request: its text, output tokens, and first-to-last token seconds."""
    stamps = []
    pieces = []
    tokens = 0
    for chunk in server.client.chat.completions.create(
            model="model", messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True},
            extra_body={"min_tokens": max_tokens, "ignore_eos": True}):
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append(time.perf_counter())
            pieces.append(chunk.choices[0].delta.content)
    if len(stamps) < 2:
        sys.exit(f"a request streamed {len(stamps)} pieces; cannot time its decode")
    # The first token is the prefill's; decode is what comes after it.
    return "".join(pieces), tokens - 1, stamps[-1] - stamps[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--servelab", default=str(ROOT / "build/release/servelab"))
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--prompts", default=str(ROOT / "data/prompts/speculative.json"))
    parser.add_argument("--workloads", nargs="+", default=["repetitive", "open"])
    parser.add_argument("--k", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", help="write every measurement here")
    args = parser.parse_args()
    for path in (args.servelab, args.model, args.prompts):
        if not Path(path).exists():
            sys.exit(f"not found: {path} (run `make build` and `make model` first)")
    prompt_sets = json.loads(Path(args.prompts).read_text())
    for workload in args.workloads:
        if not isinstance(prompt_sets.get(workload), list):
            sys.exit(f"{args.prompts} has no prompt list '{workload}'")

    arms = [("plain", [])] + [(f"ngram K={k}", ["--speculate", str(k), "--drafter", "ngram"])
                              for k in args.k]
    log(f"starting {len(arms)} servers ({args.threads} threads each)")
    servers = {}
    try:
        for name, extra in arms:
            servers[name] = Server(args.servelab, args.model, args.threads, extra)
            servers[name].pause()
        # measurements[workload][arm] = [(tokens, seconds) per round]
        measurements = {w: {name: [] for name, _ in arms} for w in args.workloads}
        acceptance = {name: [0.0, 0.0] for name, _ in arms}
        texts = {}
        for round_index in range(args.rounds):
            order = arms if round_index % 2 == 0 else list(reversed(arms))
            for name, _ in order:
                server = servers[name]
                server.resume()
                drafted0 = server.metric("servelab_spec_decode_draft_tokens_total")
                accepted0 = server.metric("servelab_spec_decode_accepted_tokens_total")
                for workload in args.workloads:
                    tokens = 0
                    seconds = 0.0
                    for i, prompt in enumerate(prompt_sets[workload]):
                        text, n, s = run_prompt(server, prompt, args.max_tokens)
                        key = (workload, i)
                        if key not in texts:
                            texts[key] = text
                        elif texts[key] != text:
                            sys.exit(f"{name}: greedy text of {workload} prompt {i} differs from "
                                     f"plain decoding's:\n{texts[key]!r}\n{text!r}")
                        tokens += n
                        seconds += s
                    measurements[workload][name].append((tokens, seconds))
                acceptance[name][0] += (server.metric("servelab_spec_decode_draft_tokens_total")
                                        - drafted0)
                acceptance[name][1] += (server.metric("servelab_spec_decode_accepted_tokens_total")
                                        - accepted0)
                server.pause()
                log(f"round {round_index + 1}/{args.rounds}: {name} done")
    finally:
        for server in servers.values():
            server.stop()

    print(f"servelab serve, 1 client, greedy chat, {args.max_tokens} tokens per prompt, "
          f"{args.threads} threads, median of {args.rounds} interleaved rounds; every arm's text "
          f"equalled plain decoding's")
    print(f"{'workload':<12}{'arm':<12}{'decode tok/s':>14}{'speedup':>10}{'drafts kept':>13}")
    report = {"arms": [name for name, _ in arms], "rows": []}
    for workload in args.workloads:
        plain = measurements[workload]["plain"]
        for name, _ in arms:
            runs = measurements[workload][name]
            rate = statistics.median(t / s for t, s in runs)
            ratio = statistics.median((t / s) / (pt / ps) for (t, s), (pt, ps) in zip(runs, plain))
            drafted, accepted = acceptance[name]
            kept = f"{accepted / drafted:.2f}" if drafted > 0 else "-"
            print(f"{workload:<12}{name:<12}{rate:>14.1f}{ratio:>9.2f}x{kept:>13}")
            report["rows"].append({"workload": workload, "arm": name, "tokens_per_s": rate,
                                   "speedup": ratio, "runs": runs})
    print("drafts kept: accepted / drafted over all workloads and rounds (/metrics)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
