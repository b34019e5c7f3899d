// fused_gate_up_swiglu.cpp — see fused_gate_up_swiglu.h.
#include "kernels/cpu/fused_gate_up_swiglu.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/error.h"
#include "kernels/cpu/dequantize.h"

namespace servelab {

namespace {

// Floats per tile: 32 KB, so that a tile pair stays in L2 while the
// epilogue reads it back.
constexpr int64_t kTileFloats = 8192;

// Groups [g, g + count) of a repacked matrix (rows 16g .. 16(g + count) − 1)
// as a matrix of their own: groups are stored one after another, each
// 16 × row_size_bytes bytes (the repacked layout keeps the GGUF bytes per
// row). Multiplying the view writes a (T, 16 · count) tile instead of
// columns of a (T, rows) buffer.
RepackedMatrix groups_view(const RepackedMatrix& w, int64_t g, int64_t count) {
    const int64_t group_bytes = kRepackRows * row_size_bytes(w.type, w.cols);
    return {w.type, w.data + g * group_bytes, count * kRepackRows, w.cols};
}

}  // namespace

void gate_up_matmul_swiglu(const QuantizedActivations& x, const RepackedMatrix& w_gate,
                           const RepackedMatrix& w_up, float* h) {
    // Checked here: an exception must not leave the parallel region.
    if (!can_repack(w_gate.type, w_gate.rows, w_gate.cols) ||
        !can_repack(w_up.type, w_up.rows, w_up.cols) || w_gate.rows != w_up.rows ||
        w_gate.cols != x.cols || w_up.cols != x.cols) {
        throw Error(
            "gate_up_matmul_swiglu: needs two repacked matrices of one shape, as wide as x");
    }
    const int64_t num_tokens = x.num_tokens;
    const int64_t ffn_dim = w_gate.rows;
    const int64_t num_groups = ffn_dim / kRepackRows;
#pragma omp parallel
    {
        // Groups per tile: one for a long prefill chunk, many for decode,
        // where a run of one group (5.6 KB of Q4_1 weights) per matrix
        // before switching to the other would break the weights' stream into
        // short pieces the prefetcher keeps losing.
        const int64_t run = std::max<int64_t>(1, kTileFloats / (num_tokens * kRepackRows));
        const int64_t width = run * kRepackRows;  // a tile's row: up to `run` groups of features
        // This thread's tiles: (T, width) each, reused across calls (they
        // only grow, so steady decoding allocates nothing).
        thread_local std::vector<float> gate_tile, up_tile;
        const size_t tile_size = size_t(num_tokens * width);
        if (gate_tile.size() < tile_size) {
            gate_tile.resize(tile_size);
            up_tile.resize(tile_size);
        }
        const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t first = num_groups * me / threads, last = num_groups * (me + 1) / threads;
        for (int64_t g = first; g < last; g += run) {
            const int64_t count = std::min(run, last - g);
            const int64_t n = count * kRepackRows;  // features in this tile
            quant_matmul_repacked_rows(x, groups_view(w_gate, g, count), gate_tile.data(), 0, n);
            quant_matmul_repacked_rows(x, groups_view(w_up, g, count), up_tile.data(), 0, n);
            // The epilogue: swiglu's arithmetic (kernels/cpu/swiglu.cpp), into h's columns.
            for (int64_t t = 0; t < num_tokens; ++t) {
                const float* gate = gate_tile.data() + t * n;
                const float* up = up_tile.data() + t * n;
                float* out = h + t * ffn_dim + g * kRepackRows;
                for (int64_t i = 0; i < n; ++i) {
                    const float gi = gate[i];
                    out[i] = gi / (1.0f + std::exp(-gi)) * up[i];
                }
            }
        }
    }
}

}  // namespace servelab
