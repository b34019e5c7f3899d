#!/usr/bin/env bash
# run_tsan.sh — run one command built with ThreadSanitizer and fail on any report.
#
#   run_tsan.sh BINARY COMMAND [ARG...]
#
# The tsan preset (clang, -fsanitize=thread) builds servelab and its unit
# tests (make build-tsan); ctest runs this script from the release tree, as
# it runs the fuzzer. BINARY is the sanitized program the command needs:
# missing, the test exits 77 (ctest: SKIPPED) and says how to build it.
#
# Every process the command starts (the servers and routers a Python test
# launches too) writes its reports to a fresh folder (log_path), so a race
# in a child fails the test even when the child's exit status goes unread.
# OpenMP: clang links LLVM's libomp, which loads its Archer tool
# (libarcher.so) when the program is built with TSan: Archer tells TSan
# what OpenMP's barriers, reductions and tasks order, so parallel regions
# need no suppressions. libomp itself is not instrumented, hence
# ignore_noninstrumented_modules (Archer's own advice).
set -euo pipefail
binary=$1
shift
if [[ ! -x $binary ]]; then
  echo "$binary is missing: make build-tsan builds it (clang, -fsanitize=thread)"
  exit 77
fi
reports=$(mktemp -d "${TMPDIR:-/tmp}/servelab-tsan.XXXXXX")
trap 'rm -rf "$reports"' EXIT
export TSAN_OPTIONS="log_path=$reports/report halt_on_error=0 second_deadlock_stack=1 \
ignore_noninstrumented_modules=1 ${TSAN_OPTIONS:-}"
# Clang 14's TSan needs the classic address-space layout: on kernels with
# more mmap randomness it stops with "unexpected memory mapping". setarch -R
# turns randomisation off for this process tree only.
launcher=()
if setarch "$(uname -m)" -R true 2>/dev/null; then launcher=(setarch "$(uname -m)" -R); fi
status=0
"${launcher[@]}" "$@" || status=$?
shopt -s nullglob
found=("$reports"/report*)
if (( ${#found[@]} > 0 )); then
  for report in "${found[@]}"; do
    echo "=== ThreadSanitizer report: $report"
    cat "$report"
  done
  echo "run_tsan: ThreadSanitizer reported in ${#found[@]} process(es) (above)"
  exit 1
fi
exit "$status"
