#!/usr/bin/env bash
# gpu_check.sh — build the CUDA kernels for the GPU at hand, run their tests, print a table.
#
# CUDA backend (issue 7). Meant for the lent GPU machine (`device` tool: an
# H200, sm_90), which has nvcc, CMake and a C++ compiler but reaches no
# package registry. So it builds tools/gpu_check/ (the CUDA kernels, the CPU
# kernels they are checked against, GoogleTest from carried sources) rather
# than the main build. Full logs go to $OUT (default gpu_check_out/); the
# last lines printed are the summary table. Takes about a minute on an H200.
#
#   tools/gpu_check.sh --fetch-deps   HERE, before a device call: copy the
#                                     GoogleTest sources into .gpu_deps/
#                                     (ignored by git; name it in `carry`)
#   tools/gpu_check.sh                on the GPU machine:
#       run(command="bash tools/gpu_check.sh", carry=[".gpu_deps"], timeout_s=420)
#   tools/gpu_check.sh --build-only   compile only (what `make test` runs here)
#
# It prints two tables: the tests (each CUDA kernel against its CPU
# reference), then each kernel's rate against the copy bandwidth and the
# cuBLAS bf16 rate it measures first (tools/gpu_check/kernel_bench.cpp).
# Not measured yet (issue 7 is in progress): end-to-end decode and prefill
# tokens/s and the transformers peer; they come with the device engine.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=check
case "${1:-}" in
  --fetch-deps) mode=fetch ;;
  --build-only) mode=build ;;
  "") ;;
  *) echo "gpu_check.sh: unknown option $1 (--fetch-deps, --build-only)" >&2; exit 2 ;;
esac

if [[ $mode == fetch ]]; then
  src=/usr/src/googletest
  [[ -f $src/CMakeLists.txt ]] || { echo "gpu_check.sh: $src missing (apt-get install googletest)" >&2; exit 1; }
  rm -rf .gpu_deps && mkdir -p .gpu_deps && cp -r "$src" .gpu_deps/googletest
  echo "copied $src to .gpu_deps/googletest ($(du -sh .gpu_deps | cut -f1)); carry .gpu_deps"
  exit 0
fi

build=${GPU_CHECK_BUILD:-build/gpu_check}
gtest=${GTEST_SOURCE_DIR:-$PWD/.gpu_deps/googletest}
[[ -f $gtest/CMakeLists.txt ]] || gtest=/usr/src/googletest
out=${OUT:-gpu_check_out}
mkdir -p "$out"
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
arch=${CUDA_ARCHITECTURES:-90}
# Configure without the system's GoogleTest, so this machine builds the same
# way the GPU machine must: from the sources.
cmake -S tools/gpu_check -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGTEST_SOURCE_DIR="$gtest" \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON > "$out/configure.log" 2>&1 ||
  { tail -20 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "built $build/cuda_tests for sm_$arch"
[[ $mode == build ]] && exit 0

{ nvidia-smi || true; } > "$out/nvidia-smi.txt" 2>&1
status=0
"$build/cuda_tests" --gtest_output="json:$out/cuda_tests.json" > "$out/cuda_tests.log" 2>&1 || status=$?
python3 - "$out/cuda_tests.json" "$out/nvidia-smi.txt" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
gpu = next((l.strip() for l in open(sys.argv[2]) if "NVIDIA" in l and "Driver" not in l), "no GPU found")
print(f"\n{gpu}")
print(f"{'test':<62} {'result':>8} {'ms':>8}")
counts = {}
for suite in report["testsuites"]:
    for t in suite["testsuite"]:
        result = "FAILED" if t.get("failures") else ("skipped" if t.get("result") == "SKIPPED" else "ok")
        counts[result] = counts.get(result, 0) + 1
        print(f"{suite['name'] + '.' + t['name']:<62} {result:>8} {t['time'].rstrip('s'):>8}")
print(", ".join(f"{n} {r}" for r, n in sorted(counts.items())))
PY
echo
"$build/cuda_kernel_bench" 2>&1 | tee "$out/kernel_bench.txt" || status=1
exit $status
