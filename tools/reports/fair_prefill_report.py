#!/usr/bin/env python3
"""fair_prefill_report.py — what fair prefill buys a short request behind a long prompt, served.

Starts `servelab serve` (its defaults: --max-num-batched-tokens 512) once per
--long-prefill-tokens value and, for each, measures with the official client:
  * a 4-token request's time to first token alone;
  * the same request's TTFT sent while one long prompt (2,000 tokens by
    default) is being prefilled;
  * that long prompt's own TTFT (what the cap costs it).
Each figure is the median of --repeats runs. docs/serving.md ("Fair prefill")
quotes its output.

Usage: tools/reports/fair_prefill_report.py --servelab build/release/servelab \
           --model data/models/SmolLM2-135M-Instruct.Q4_1.gguf [--caps 128 0]
"""
import argparse
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "e2e"))
from serve_helpers import Server, ttft_s  # noqa: E402


def measure(servelab, model, cap, long_tokens, repeats, threads):
    server = Server(servelab, model, ["--long-prefill-tokens", str(cap), "--threads", str(threads),
                                      "--no-prefix-caching"], kv_memory="1GiB")
    short_prompt = [28, 3458, 314, 253]  # four ordinary SmolLM2 tokens
    alone, behind, long_ttft = [], [], []
    try:
        client = server.client(timeout=600)
        ttft_s(client, short_prompt, {}, "warm-up")
        for repeat in range(repeats):
            results = {}
            ttft_s(client, short_prompt, results, "alone")
            alone.append(results["alone"])
            rng = random.Random(repeat)
            long_prompt = [rng.randrange(100, 40000) for _ in range(long_tokens)]
            worker = threading.Thread(target=ttft_s, args=(client, long_prompt, results, "long"))
            worker.start()
            # Send the short request once the long prompt is running.
            deadline = time.monotonic() + 30
            while (server.metric("servelab_num_requests_running") < 1 and
                   time.monotonic() < deadline):
                time.sleep(0.005)
            ttft_s(client, short_prompt, results, "behind")
            worker.join()
            behind.append(results["behind"])
            long_ttft.append(results["long"])
    finally:
        server.stop(timeout=600)
    return statistics.median(alone), statistics.median(behind), statistics.median(long_ttft)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--caps", type=int, nargs="+", default=[128, 0],
                        help="--long-prefill-tokens values to compare (0 = no cap)")
    parser.add_argument("--long-tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    print(f"| --long-prefill-tokens | 4-token TTFT alone | behind a {args.long_tokens}-token "
          f"prompt | the long prompt's TTFT |")
    print("|---|---|---|---|")
    for cap in args.caps:
        print(f"  measuring --long-prefill-tokens {cap} ...", file=sys.stderr, flush=True)
        alone, behind, long_ttft = measure(args.servelab, args.model, cap, args.long_tokens,
                                           args.repeats, args.threads)
        print(f"| {cap}{' (no cap)' if cap == 0 else ''} | {alone * 1e3:.0f} ms | "
              f"{behind * 1e3:.0f} ms | {long_ttft:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
