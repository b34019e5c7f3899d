#!/usr/bin/env bash
# run_fuzz.sh — a bounded libFuzzer run of the GGUF reader (tests/fuzz/gguf_fuzz.cpp).
#
#   run_fuzz.sh FUZZER SECONDS CORPUS_OUT CORPUS_IN
#
# The fuzz preset (clang) builds FUZZER (make build-fuzz); ctest runs this
# script. Exits 77 (ctest: SKIPPED) when the fuzzer was never built, saying
# how to build it; otherwise the fuzzer's own status (a crash is a failure).
set -euo pipefail
fuzzer=$1 seconds=$2 corpus_out=$3 corpus_in=$4
if [[ ! -x $fuzzer ]]; then
  echo "$fuzzer is missing: make build-fuzz builds it (clang's libFuzzer)"
  exit 77
fi
mkdir -p "$corpus_out"
ASAN_OPTIONS=detect_leaks=1 exec "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -timeout=10 -seed=1 "$corpus_out" "$corpus_in"
