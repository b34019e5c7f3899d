#!/usr/bin/env bash
# bench_kv_dtypes.sh — decode speed with different KV-cache element types, interleaved.
#
# Lab 3 (chapter 11.3). Runs `servelab bench --json` once per type per round,
# alternating the types so that machine drift hits them alike, and prints the
# median decode tokens/s of each type and its ratio to the first.
# Usage: tools/reports/bench_kv_dtypes.sh [--rounds N] [--prompt-tokens P] [--gen-tokens G] [TYPES...]
#   defaults: 3 rounds, 1024-token prompt, 64 generated, types f32 int8
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 prompt=1024 gen=64 types=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --prompt-tokens) prompt=$2; shift 2 ;;
    --gen-tokens) gen=$2; shift 2 ;;
    -*) echo "bench_kv_dtypes.sh: unknown option $1" >&2; exit 2 ;;
    *) types+=("$1"); shift ;;
  esac
done
[[ ${#types[@]} -gt 0 ]] || types=(f32 int8)
bin=${SERVELAB_BIN:-build/release/servelab}
[[ -x $bin ]] || { echo "bench_kv_dtypes.sh: $bin not built (make build)" >&2; exit 1; }
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for t in "${types[@]}"; do
    echo "round $r/$rounds: $t" >&2
    "$bin" -q bench --json --kv-layout contiguous --kv-dtype "$t" --prompt-tokens "$prompt" --gen-tokens "$gen" \
      --repeats 1 | python3 -c "import json,sys; print('$t', json.load(sys.stdin)['decode_tokens_per_s'])" \
      >> "$results"
  done
done
python3 - "$results" "$prompt" "$gen" "${types[@]}" <<'PY'
import statistics, sys
path, prompt, gen, types = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = {t: [] for t in types}
for line in open(path):
    t, value = line.split()
    runs[t].append(float(value))
base = statistics.median(runs[types[0]])
print(f"decode tokens/s, {prompt}-token prompt, {gen} generated (median of {len(runs[types[0]])}, interleaved)")
for t in types:
    m = statistics.median(runs[t])
    print(f"  {t:<5} {m:7.2f}   x{m / base:.3f}   runs {', '.join(f'{v:.2f}' for v in runs[t])}")
PY
