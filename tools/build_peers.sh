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
# --cuda builds the GPU peer instead (issue 48): llama.cpp's CUDA backend,
# only llama-bench and llama-batched-bench, into build/peers-cuda/bin/, with
# its own stamp, from the same sdist (build/peers/ keeps the tarball and the
# unpacked source for both builds). tools/gpu_check.sh carries the two
# binaries to the lent H200 and runs them on the same GGUF files as servelab.
# Its flags, and why:
#   - GGML_CUDA=ON for sm_90 only (90-real: Hopper machine code, no PTX), so
#     nvcc compiles each of the ~140 kernel files once, not for eight GPUs;
#   - flash attention ON (llama.cpp's default: the peer runs as a user gets
#     it), its vector kernels only for the f16 K/V cache both benchmarks use
#     (GGML_CUDA_FA_QUANTS=f16-f16; the other cache types are never touched);
#   - static: BUILD_SHARED_LIBS=OFF and the CUDA runtime linked from
#     libcudart_static.a. cuBLAS stays shared (this toolkit ships no static
#     cuBLAS); the GPU machine has the same CUDA 13 toolkit, whose lib64
#     gpu_check.sh puts on LD_LIBRARY_PATH;
#   - the CPU side at AVX2 only and without OpenMP, since the GPU machine's
#     CPU is not this one and does no work in a full offload;
#   - stripped, to fit the device tool's 64 MiB carry limit.
# On 2 cores it takes an hour or more (JOBS=2 nice -n 19 is what the course
# machines can spare); the log is build/peers-cuda/build.log.
#
# Usage: tools/build_peers.sh [--cuda] [--print-dir]   (prints the bin folder at the end)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SDIST_DIR="$ROOT/build/peers"
PEERS="$SDIST_DIR"
CUDA_PEER=0
if [[ "${1:-}" == "--cuda" ]]; then CUDA_PEER=1; PEERS="$ROOT/build/peers-cuda"; shift; fi
VERSION="$(sed -n 's/^llama-cpp-python\[server\]==\([0-9.]*\).*/\1/p' "$ROOT/tools/setup/requirements-peers.txt")"
if [[ -z "$VERSION" ]]; then
    echo "build_peers: no llama-cpp-python pin in tools/setup/requirements-peers.txt" >&2
    exit 2
fi
JOBS="${JOBS:-$(nproc)}"
log() { echo "[build-peers] $*" >&2; }

has_flag() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1"; }
cuda_flags() {
    local cuda_home="${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}"
    CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
        -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
        -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA=ON
        -DGGML_CUDA_FA_QUANTS=f16-f16 -DGGML_CUDA_NCCL=OFF
        "-DCMAKE_CUDA_COMPILER=$cuda_home/bin/nvcc"
        "-DCUDA_cudart_LIBRARY=$cuda_home/lib64/libcudart_static.a"
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF)
}
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
TOOLS=(llama-bench llama-batched-bench llama-server llama-perplexity llama-completion)
if ((CUDA_PEER)); then
    cuda_flags
    TOOLS=(llama-bench llama-batched-bench)
fi
STAMP_TEXT="llama-cpp-python==$VERSION ${CMAKE_FLAGS[*]}"

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
    mkdir -p "$PEERS" "$SDIST_DIR"
    SDIST="$SDIST_DIR/llama_cpp_python-$VERSION.tar.gz"
    if [[ ! -f "$SDIST" ]]; then
        log "downloading the llama-cpp-python $VERSION sdist (about 75 MB)"
        python3 -m pip download -q --no-binary :all: --no-deps \
            "llama-cpp-python==$VERSION" -d "$SDIST_DIR/download"
        mv "$SDIST_DIR/download/llama_cpp_python-$VERSION.tar.gz" "$SDIST"
        rm -rf "$SDIST_DIR/download"
    fi
    SRC="$SDIST_DIR/src/llama_cpp_python-$VERSION"
    if [[ ! -d "$SRC/vendor/llama.cpp" ]]; then
        rm -rf "$SDIST_DIR/src" && mkdir -p "$SDIST_DIR/src"
        tar xzf "$SDIST" -C "$SDIST_DIR/src"
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
    # The GPU peer travels to the device machine: symbols off, sizes logged.
    if ((CUDA_PEER)); then
        for tool in "${BUILD_TOOLS[@]}"; do strip "$PEERS/bin/$tool"; done
        log "stripped sizes: $(du -b "${BUILD_TOOLS[@]/#/$PEERS/bin/}" | awk '{printf "%s %d bytes; ", $2, $1}')"
    fi
    # The commit the sdist vendors, for the reports' header: the sdist has no
    # .git, so llama.cpp's own build info says "unknown"; its changelog names it.
    (grep -m1 -o 'ggml-org/llama.cpp@[0-9a-f]*' "$SRC/CHANGELOG.md" | cut -d@ -f2 || echo unknown) \
        >"$PEERS/commit"
    echo "$STAMP_TEXT" >"$PEERS/stamp"
    log "built into $PEERS/bin"
fi
if [[ "${1:-}" == "--print-dir" ]]; then echo "$PEERS/bin"; fi
