#!/usr/bin/env python3
"""serve_side_by_side.py — servelab's server and llama.cpp's, one trace, one machine.

The serving benchmark of issue 10 (chapter 11.7), run from one command
(`make serve-report`). It starts `servelab serve` and llama.cpp's
OpenAI-compatible server (`python -m llama_cpp.server` from
llama-cpp-python, installed into .venv on first use: it builds llama.cpp
from source, several minutes) on the same GGUF with the same thread count,
then replays the same trace against each with `servelab bench serve` at
every request rate. Runs alternate between the servers (A B, then B A on
the next repetition), so a slow patch of a shared machine hits both; the
idle server sleeps meanwhile. Each (repetition, rate) draws its own prompts
(--prompt-seed), the same for both servers, so neither replays prompts
already in its cache.

Prints one table (throughput and TTFT/TPOT/E2E percentiles per server and
rate, and servelab's ratio to llama.cpp) and writes every run's full
report to --out as JSON, which notebooks/serving_latency.ipynb plots.

What differs between the two by design: servelab batches every running
request into each forward pass (continuous batching, Lab 5); llama.cpp's
Python server runs one request at a time (requests queue on a lock;
--interrupt_requests False so a new request waits instead of cutting off
the running one). Both generate exactly each request's output length
(min_tokens = max_tokens) greedily.
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

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_BIN = ROOT / "build/release/servelab"
PEER_REQUIREMENTS = ROOT / "tools/requirements-peers.txt"


def log(message: str) -> None:
    print(f"[serve-report] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_llama_cpp_server() -> None:
    """Installs llama-cpp-python[server] into this interpreter's environment if missing."""
    try:
        import llama_cpp.server.app  # noqa: F401
        return
    except ImportError:
        pass
    log(f"installing {PEER_REQUIREMENTS.name} (llama-cpp-python builds llama.cpp from source: "
        "several minutes on 2 cores)")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(PEER_REQUIREMENTS)],
                   check=True)


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
        servers.append(Server("llama.cpp", [
            sys.executable, "-m", "llama_cpp.server", "--model", str(args.model),
            "--host", "127.0.0.1", "--port", str(port), "--model_alias", model_name,
            "--n_ctx", str(args.context), "--n_threads", llama_threads,
            "--n_threads_batch", llama_threads, "--interrupt_requests", "False"],
            port=port, log_path=work_dir / "llama_cpp.log"))
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
          + f"; {results['settings']['limit']} requests of "
          f"{Path(results['settings']['trace']).name} (prompts <= "
          f"{results['settings']['max_prompt']}, outputs <= {results['settings']['max_output']} "
          f"tokens); medians of {results['settings']['repetitions']} repetition(s); times in ms")
    print("'serial': the first requests one at a time (no queueing, no batching)")
    print(f"{'rate/s':>7} {'server':<10}" + "".join(f"{name:>11}" for name, _ in metrics))
    rates = results["settings"]["rates"]
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
    parser.add_argument("--rates", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0],
                        help="Poisson request rates (requests/s)")
    parser.add_argument("--limit", type=int, default=24, help="the trace's first N requests")
    parser.add_argument("--max-prompt", type=int, default=128)
    parser.add_argument("--max-output", type=int, default=64)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--serial-requests", type=int, default=4,
                        help="first, this many requests one at a time: each server unloaded "
                        "(0 = skip)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="servelab's threads, and llama.cpp's unless --llama-threads")
    parser.add_argument("--llama-threads", type=int, default=0,
                        help="llama.cpp's n_threads (default: --threads)")
    parser.add_argument("--context", type=int, default=2048, help="llama.cpp's n_ctx")
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
    if not args.servelab_only:
        ensure_llama_cpp_server()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work_dir = args.out.parent / (args.out.stem + "_logs")
    work_dir.mkdir(exist_ok=True)

    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                if k not in ("out", "servelab_bin", "start_timeout_s")}
    if not args.servelab_only:
        import llama_cpp
        settings["llama_cpp_python"] = llama_cpp.__version__
    results = {"machine": machine_info(), "settings": settings, "runs": []}
    servers = start_servers(args, work_dir)
    try:
        total = (args.repetitions * len(args.rates) + (args.serial_requests > 0)) * len(servers)
        if args.serial_requests > 0:
            for server in servers:
                log(f"run {len(results['runs']) + 1}/{total}: {server.name}, "
                    f"{args.serial_requests} requests one at a time")
                report = bench_once(args, server, 0, 0, args.serial_requests, max_concurrency=1)
                report.update(rate="serial", repetition=0)
                results["runs"].append(report)
                time.sleep(1.0)
        for repetition in range(args.repetitions):
            for rate_index, rate in enumerate(args.rates):
                prompt_seed = 1 + repetition * len(args.rates) + rate_index
                order = servers if repetition % 2 == 0 else servers[::-1]
                for server in order:
                    log(f"run {len(results['runs']) + 1}/{total}: {server.name} at {rate:g} "
                        f"requests/s (repetition {repetition + 1})")
                    report = bench_once(args, server, rate, prompt_seed, args.limit)
                    report["repetition"] = repetition
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
