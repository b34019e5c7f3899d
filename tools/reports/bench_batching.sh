#!/usr/bin/env bash
# bench_batching.sh — continuous against static batching at several concurrency levels.
#
# Lab 5 (chapter 11.5). For each concurrency level, runs `servelab bench
# throughput` on the same trace requests with --batching continuous and then
# static (back to back, so machine drift hits both alike), keeps each run's
# JSON (with every request and step) in OUT_DIR, and prints one table: output
# tokens/s, mean TTFT, p99 inter-token latency and mean end-to-end latency of
# each, and the continuous/static throughput ratio.
# Usage: tools/reports/bench_batching.sh [--trace T] [--limit N] [--max-output N] [--out DIR] [LEVELS...]
#   defaults: data/traces/sharegpt_like.jsonl, 64 requests, the trace's output
#   lengths, OUT_DIR bench_batching/, levels 8 32. On the 2-core machine the
#   defaults take about 25 minutes (SmolLM2-135M).
set -euo pipefail
cd "$(dirname "$0")/../.."
trace=data/traces/sharegpt_like.jsonl limit=64 max_output=0 out=bench_batching levels=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --trace) trace=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --max-output) max_output=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -*) echo "bench_batching.sh: unknown option $1" >&2; exit 2 ;;
    *) levels+=("$1"); shift ;;
  esac
done
[[ ${#levels[@]} -gt 0 ]] || levels=(8 32)
bin=${SERVELAB_BIN:-build/release/servelab}
[[ -x $bin ]] || { echo "bench_batching.sh: $bin not built (make build)" >&2; exit 1; }
mkdir -p "$out"
for c in "${levels[@]}"; do
  for batching in continuous static; do
    echo "concurrency $c: $batching batching" >&2
    "$bin" -q bench throughput --trace "$trace" --limit "$limit" --max-output "$max_output" \
      --max-concurrency "$c" --batching "$batching" --json --output "$out/c${c}_$batching.json" \
      > /dev/null
  done
done
python3 - "$out" "${levels[@]}" <<'PY'
import json, sys
out, levels = sys.argv[1], sys.argv[2:]
def load(c, b):
    return json.load(open(f"{out}/c{c}_{b}.json"))
first = load(levels[0], "continuous")["config"]
print(f"{first['model']}, {first['trace']}, {first['requests']} requests, {first['cpu']}, "
      f"{first['threads']} threads, {first['date']}")
print(f"{'concurrent':>10} {'batching':>11} {'out tok/s':>10} {'TTFT mean':>10} {'ITL p99':>9} "
      f"{'e2e mean':>9} {'preempt':>8} {'ratio':>6}")
for c in levels:
    runs = {b: load(c, b)["summary"] for b in ("continuous", "static")}
    for b, s in runs.items():
        ratio = s["output_tokens_per_s"] / runs["static"]["output_tokens_per_s"]
        print(f"{c:>10} {b:>11} {s['output_tokens_per_s']:10.1f} {s['ttft_ms']['mean'] / 1000:9.1f}s "
              f"{s['itl_ms']['p99']:7.0f}ms {s['e2e_ms']['mean'] / 1000:8.1f}s {s['preemptions']:8d} "
              f"{ratio:6.2f}")
PY
