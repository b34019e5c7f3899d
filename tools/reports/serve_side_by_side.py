#!/usr/bin/env python3
"""serve_side_by_side.py — servelab's server and llama.cpp's, one trace, one machine.

The serving benchmark (chapter 11.7), run from one command (`make
serve-report`). It starts `servelab serve` at its defaults and llama.cpp's
own C++ server, `llama-server` (built from the pinned llama-cpp-python
sdist's source by tools/build_peers.sh into build/peers/bin, the same build
`make cpu-report` uses; 10 minutes or more on 2 cores the first time), on
the same GGUF with the same thread count. llama-server runs with continuous
batching on and `-np` slots at least the highest concurrency, each slot
with --context tokens, so neither server ever queues for want of a slot.
Then it replays the same trace against each with `servelab bench serve`:
  - closed-loop concurrency levels (--concurrency, default 1 4 8 16 32):
    the requests all at once, at most C in flight;
  - open-loop Poisson arrivals at each --rates value (default 1 and 4/s);
  - optionally (--serial-requests) the first requests one at a time.
Runs alternate between the servers (A B, then B A on the next repetition),
so a slow patch of a shared machine hits both; the idle server sleeps
meanwhile. Each run draws its own prompts (--prompt-seed), the same for
both servers, so neither replays prompts already in its cache. Both
generate exactly each request's output length (min_tokens = max_tokens)
greedily.

Prints one table (throughput, TTFT and TPOT p50/p99, end-to-end latency and
goodput per server and row, and servelab's ratio to llama.cpp) and writes
every run's full report to --out as JSON, which
notebooks/serving_latency.ipynb plots.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_BIN = ROOT / "build/release/servelab"


def log(message: str) -> None:
    print(f"[serve-report] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_server_binary() -> Path:
    """llama.cpp's llama-server from the pinned source, built on first use."""
    built = subprocess.run(["bash", str(ROOT / "tools/build_peers.sh"), "--print-dir"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"tools/build_peers.sh failed:\n{built.stderr[-2000:]}")
    binary = Path(built.stdout.strip().splitlines()[-1]) / "llama-server"
    if not binary.is_file():
        raise RuntimeError(f"tools/build_peers.sh built no llama-server at {binary}")
    return binary


class Server:
    """One server process: started, waited for, stopped; its log kept in a file."""

    def __init__(self, name: str, command: list[str], port: int, log_path: Path, env=None):
        self.name, self.port, self.log_path = name, port, log_path
        self.url = f"http://127.0.0.1:{port}"
        log(f"starting {name}: {' '.join(command)}")
        self.log_file = open(log_path, "w")
        self.process = subprocess.Popen(command, stdout=self.log_file, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}; "
                                   f"its log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer within {timeout_s:.0f} s; "
                           f"its log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        self.log_file.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log_file.close()


def start_servers(args, work_dir: Path) -> list[Server]:
    model_name = args.model.stem
    threads = str(args.threads)
    llama_threads = str(args.llama_threads or args.threads)
    port = free_port()
    servers = [Server("servelab", [str(args.servelab_bin), "serve", "--model", str(args.model),
                                   "--port", str(port), "--threads", threads,
                                   "--served-model-name", model_name],
                      port=port, log_path=work_dir / "servelab.log")]
    if not args.servelab_only:
        port = free_port()
        slots = max([1, *args.concurrency])
        servers.append(Server("llama.cpp", [
            str(args.llama_server), "--model", str(args.model), "--host", "127.0.0.1",
            "--port", str(port), "--alias", model_name, "--threads", llama_threads,
            "--threads-batch", llama_threads, "--parallel", str(slots),
            "--ctx-size", str(args.context * slots), "--cont-batching"],
            port=port, log_path=work_dir / "llama_server.log"))
    for server in servers:
        server.wait_ready(args.start_timeout_s)
        log(f"{server.name} is up at {server.url}")
    return servers


def bench_once(args, server: Server, rate: float, prompt_seed: int, limit: int,
               max_concurrency: int = 0) -> dict:
    command = [str(args.servelab_bin), "-q", "bench", "serve", "--url", server.url,
               "--trace", str(args.trace), "--limit", str(limit),
               "--request-rate", str(rate), "--max-concurrency", str(max_concurrency), "--max-prompt", str(args.max_prompt),
               "--max-output", str(args.max_output), "--prompt-format", args.prompt_format,
               "--vocab-size", str(args.vocab_size), "--prompt-seed", str(prompt_seed),
               "--seed", str(prompt_seed), "--slo-ttft-ms", str(args.slo_ttft_ms),
               "--slo-tpot-ms", str(args.slo_tpot_ms), "--json"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"bench serve against {server.name} failed:\n{result.stderr.strip()}\n"
                           f"{server.name}'s log:\n{server.log_tail()}")
    report = json.loads(result.stdout)
    report.update(server=server.name, rate=rate, prompt_seed=prompt_seed)
    return report


def machine_info() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def median_of(runs: list[dict], *keys: str) -> float:
    values = []
    for run in runs:
        value = run
        for key in keys:
            value = value[key]
        values.append(value)
    return statistics.median(values)


def print_table(results: dict) -> None:
    runs = results["runs"]
    servers = list(dict.fromkeys(r["server"] for r in runs))
    metrics = [("req/s", ("requests_per_s",)), ("out tok/s", ("output_tokens_per_s",)),
               ("TTFT p50", ("ttft_ms", "median")), ("TTFT p99", ("ttft_ms", "p99")),
               ("TPOT p50", ("tpot_ms", "median")), ("TPOT p99", ("tpot_ms", "p99")),
               ("E2E p50", ("e2e_ms", "median")), ("E2E p99", ("e2e_ms", "p99")),
               ("goodput", ("goodput_requests_per_s",))]
    print(f"\n{results['machine']['cpu']}, {results['machine']['cores']} cores, "
          f"{results['settings']['threads']} threads"
          + (f" (llama.cpp {results['settings']['llama_threads']})"
             if results['settings']['llama_threads'] else "")
          + f"; {results['settings']['limit']} (or 2 x N) requests of "
          f"{Path(results['settings']['trace']).name} (prompts <= "
          f"{results['settings']['max_prompt']}, outputs <= {results['settings']['max_output']} "
          f"tokens); medians of {results['settings']['repetitions']} repetition(s); times in ms")
    print("rows: 'cN' N requests in flight at once (closed loop); a number, Poisson arrivals "
          "at that many requests/s; 'serial', the first requests one at a time")
    print(f"{'row':>7} {'server':<10}" + "".join(f"{name:>11}" for name, _ in metrics))
    rates = [f"c{c}" for c in results["settings"]["concurrency"]] + results["settings"]["rates"]
    if results["settings"]["serial_requests"] > 0:
        rates = ["serial"] + rates
    for rate in rates:
        row_values = {}
        for server in servers:
            chosen = [r for r in runs if r["server"] == server and r["rate"] == rate]
            row_values[server] = [median_of(chosen, *keys) for _, keys in metrics]
            print(f"{rate:>7} {server:<10}" +
                  "".join(f"{v:>11.2f}" if v < 100 else f"{v:>11.0f}" for v in row_values[server]))
        if len(servers) == 2:
            a, b = (row_values[s] for s in servers)
            ratios = [(x / y if y else float("nan")) for x, y in zip(a, b)]
            print(f"{'':>7} {'ratio':<10}" + "".join(f"{r:>10.2f}x" for r in ratios))
    if len(servers) == 2:
        print(f"ratio = {servers[0]} / {servers[1]}: above 1 is better for throughput and "
              "goodput, worse for latencies")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--servelab-bin", type=Path, default=DEFAULT_BIN)
    parser.add_argument("--trace", type=Path, default=ROOT / "data/traces/sharegpt_like.jsonl")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 4, 8, 16, 32],
                        help="closed-loop levels: all requests at once, at most C in flight")
    parser.add_argument("--rates", type=float, nargs="*", default=[1.0, 4.0],
                        help="Poisson request rates (requests/s)")
    parser.add_argument("--limit", type=int, default=24,
                        help="the trace's first N requests per rate (and per concurrency "
                        "level, at least 2 x C)")
    parser.add_argument("--max-prompt", type=int, default=128)
    parser.add_argument("--max-output", type=int, default=64)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--serial-requests", type=int, default=0,
                        help="first, this many requests one at a time: each server unloaded "
                        "(0 = skip)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="servelab's threads, and llama.cpp's unless --llama-threads")
    parser.add_argument("--llama-threads", type=int, default=0,
                        help="llama.cpp's n_threads (default: --threads)")
    parser.add_argument("--context", type=int, default=2048,
                        help="llama-server's context per slot (its --ctx-size is this x slots)")
    parser.add_argument("--llama-server", type=Path, default=None,
                        help="llama-server binary (default: tools/build_peers.sh builds it)")
    parser.add_argument("--prompt-format", choices=["text", "ids"], default="text",
                        help="ids works only with --servelab-only")
    parser.add_argument("--vocab-size", type=int, default=49152)
    parser.add_argument("--slo-ttft-ms", type=float, default=2000)
    parser.add_argument("--slo-tpot-ms", type=float, default=200)
    parser.add_argument("--servelab-only", action="store_true",
                        help="skip llama.cpp (no install, no peer runs)")
    parser.add_argument("--start-timeout-s", type=float, default=180)
    parser.add_argument("--out", type=Path, default=ROOT / "build/serve_side_by_side.json")
    args = parser.parse_args()

    for path, what in [(args.model, "model (make model)"), (args.servelab_bin, "servelab (make build)"),
                       (args.trace, "trace")]:
        if not path.is_file():
            parser.error(f"no {what} at {path}")
    if args.prompt_format == "ids" and not args.servelab_only:
        parser.error("llama.cpp's server takes text prompts only: use --prompt-format text")
    if not args.servelab_only and args.llama_server is None:
        args.llama_server = llama_server_binary()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work_dir = args.out.parent / (args.out.stem + "_logs")
    work_dir.mkdir(exist_ok=True)

    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k not in ("out", "servelab_bin", "start_timeout_s")}
    if not args.servelab_only:
        settings["llama_server"] = str(args.llama_server)
    results = {"machine": machine_info(), "settings": settings, "runs": []}
    servers = start_servers(args, work_dir)
    try:
        # One row per (label, rate, limit, max concurrency).
        rows = [(f"c{c}", 0.0, max(args.limit, 2 * c), c) for c in args.concurrency]
        rows += [(rate, rate, args.limit, 0) for rate in args.rates]
        total = (args.repetitions * len(rows) + (args.serial_requests > 0)) * len(servers)
        if args.serial_requests > 0:
            for server in servers:
                log(f"run {len(results['runs']) + 1}/{total}: {server.name}, "
                    f"{args.serial_requests} requests one at a time")
                report = bench_once(args, server, 0, 0, args.serial_requests, max_concurrency=1)
                report.update(rate="serial", repetition=0, requests=args.serial_requests)
                results["runs"].append(report)
                time.sleep(1.0)
        for repetition in range(args.repetitions):
            for row_index, (label, rate, limit, concurrency) in enumerate(rows):
                prompt_seed = 1 + repetition * len(rows) + row_index
                order = servers if repetition % 2 == 0 else servers[::-1]
                for server in order:
                    what = (f"{concurrency} at a time" if concurrency else f"{rate:g} requests/s")
                    log(f"run {len(results['runs']) + 1}/{total}: {server.name}, {limit} "
                        f"requests, {what} (repetition {repetition + 1})")
                    report = bench_once(args, server, rate, prompt_seed, limit, concurrency)
                    report.update(rate=label, repetition=repetition, requests=limit)
                    results["runs"].append(report)
                    time.sleep(1.0)  # let the finished server's threads go idle
    finally:
        for server in servers:
            server.stop()
    args.out.write_text(json.dumps(results, indent=1))
    print_table(results)
    log(f"every run's report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
