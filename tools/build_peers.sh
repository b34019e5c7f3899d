#!/usr/bin/env bash
# build_peers.sh — llama.cpp's own tools, built from the pinned source: the peer
# that `make cpu-report` (tools/reports/cpu_peer_report.py) and the serving report
# measure servelab against.
#
# The source is the llama.cpp vendored in the llama-cpp-python sdist that
# tools/setup/requirements-peers.txt pins, so every machine builds the same commit.
# It builds llama-bench, llama-batched-bench, llama-server, and
# llama-perplexity and llama-completion (the weight-quantization goldens,
# tools/goldens/make_quant_goldens.py) into build/peers/bin/ and skips everything on a
# second run (the stamp file records the version and flags it was built
# with). A tool added to TOOLS later is built alone: with the stamp
# unchanged, only the tools missing from bin/ are passed to the build, in
# the cmake tree that is already there, so the shared libraries are reused.
#
# Flags: GGML_NATIVE=OFF with AVX2/FMA/F16C/BMI2 and, where the CPU has them,
# AVX-512 F/VNNI/BF16/VBMI spelled out, and AMX off. Why not native: on the
# KVM guests of this course a GGML_NATIVE=ON build enables AMX from the
# compiler's view of the host and dies with SIGILL in its AMX kernel
# (tilezero in tinygemm_kernel_amx) when the guest has not been granted the
# tile state. The explicit flags give the same SIMD kernels llama.cpp's
# release builds use, and nothing the guest cannot run.
#
# Usage: tools/build_peers.sh [--print-dir]   (prints build/peers/bin at the end)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PEERS="$ROOT/build/peers"
VERSION="$(sed -n 's/^llama-cpp-python\[server\]==\([0-9.]*\).*/\1/p' "$ROOT/tools/setup/requirements-peers.txt")"
if [[ -z "$VERSION" ]]; then
    echo "build_peers: no llama-cpp-python pin in tools/setup/requirements-peers.txt" >&2
    exit 2
fi
JOBS="${JOBS:-$(nproc)}"
log() { echo "[build-peers] $*" >&2; }

has_flag() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1"; }
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_OPENMP=ON
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF)
if has_flag avx512f && has_flag avx512bw && has_flag avx512vl; then
    CMAKE_FLAGS+=(-DGGML_AVX512=ON)
    has_flag avx512_vnni && CMAKE_FLAGS+=(-DGGML_AVX512_VNNI=ON)
    has_flag avx512_bf16 && CMAKE_FLAGS+=(-DGGML_AVX512_BF16=ON)
    has_flag avx512vbmi && CMAKE_FLAGS+=(-DGGML_AVX512_VBMI=ON)
fi
has_flag avx_vnni && CMAKE_FLAGS+=(-DGGML_AVX_VNNI=ON)
STAMP_TEXT="llama-cpp-python==$VERSION ${CMAKE_FLAGS[*]}"
TOOLS=(llama-bench llama-batched-bench llama-server llama-perplexity llama-completion)

stamp_matches() { [[ -f "$PEERS/stamp" && "$(cat "$PEERS/stamp")" == "$STAMP_TEXT" ]]; }

all_built() {
    for tool in "${TOOLS[@]}"; do [[ -x "$PEERS/bin/$tool" ]] || return 1; done
    stamp_matches
}

# What to build: every tool when the version or flags changed (or nothing
# was built yet), else only the ones missing from bin/.
tools_to_build() {
    for tool in "${TOOLS[@]}"; do
        if ! stamp_matches || [[ ! -x "$PEERS/bin/$tool" ]]; then echo "$tool"; fi
    done
}

if ! all_built; then
    mkdir -p "$PEERS"
    SDIST="$PEERS/llama_cpp_python-$VERSION.tar.gz"
    if [[ ! -f "$SDIST" ]]; then
        log "downloading the llama-cpp-python $VERSION sdist (about 75 MB)"
        python3 -m pip download -q --no-binary :all: --no-deps \
            "llama-cpp-python==$VERSION" -d "$PEERS/download"
        mv "$PEERS/download/llama_cpp_python-$VERSION.tar.gz" "$SDIST"
        rm -rf "$PEERS/download"
    fi
    SRC="$PEERS/src/llama_cpp_python-$VERSION"
    if [[ ! -d "$SRC/vendor/llama.cpp" ]]; then
        rm -rf "$PEERS/src" && mkdir -p "$PEERS/src"
        tar xzf "$SDIST" -C "$PEERS/src"
    fi
    mapfile -t BUILD_TOOLS < <(tools_to_build)
    log "building ${BUILD_TOOLS[*]} from its vendor/llama.cpp with $JOBS jobs (10 minutes or more on 2 cores)"
    log "flags: ${CMAKE_FLAGS[*]}"
    cmake -S "$SRC/vendor/llama.cpp" -B "$PEERS/cmake" "${CMAKE_FLAGS[@]}" >"$PEERS/configure.log" 2>&1 ||
        { tail -20 "$PEERS/configure.log" >&2; log "configure failed (full log: $PEERS/configure.log)"; exit 1; }
    cmake --build "$PEERS/cmake" -j "$JOBS" --target "${BUILD_TOOLS[@]}" >"$PEERS/build.log" 2>&1 ||
        { tail -20 "$PEERS/build.log" >&2; log "build failed (full log: $PEERS/build.log)"; exit 1; }
    mkdir -p "$PEERS/bin"
    for tool in "${BUILD_TOOLS[@]}"; do cp "$PEERS/cmake/bin/$tool" "$PEERS/bin/$tool"; done
    # The commit the sdist vendors, for the reports' header: the sdist has no
    # .git, so llama.cpp's own build info says "unknown"; its changelog names it.
    (grep -m1 -o 'ggml-org/llama.cpp@[0-9a-f]*' "$SRC/CHANGELOG.md" | cut -d@ -f2 || echo unknown) \
        >"$PEERS/commit"
    echo "$STAMP_TEXT" >"$PEERS/stamp"
    log "built into $PEERS/bin"
fi
if [[ "${1:-}" == "--print-dir" ]]; then echo "$PEERS/bin"; fi
