// fused_qkv_rope.cpp — see fused_qkv_rope.h.
#include "kernels/cpu/fused_qkv_rope.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/common/error.h"

namespace servelab {

void fill_rope_table(const int64_t* positions, int64_t num_tokens, const RopeParams& params,
                     RopeTable& table) {
    const int64_t num_pairs = params.rope_dim / 2;
    table.num_tokens = num_tokens;
    table.num_pairs = num_pairs;
    table.cos.resize(size_t(num_tokens * num_pairs));
    table.sin.resize(size_t(num_tokens * num_pairs));
    for (int64_t t = 0; t < num_tokens; ++t) {
        for (int64_t pair = 0; pair < num_pairs; ++pair) {
            // rope_apply's formula, in double (kernels/cpu/rope.cpp): the same bits.
            const double inv_freq =
                std::pow(double(params.freq_base), -2.0 * double(pair) / double(params.rope_dim));
            const double angle = double(positions[t]) * inv_freq;
            table.cos[size_t(t * num_pairs + pair)] = float(std::cos(angle));
            table.sin[size_t(t * num_pairs + pair)] = float(std::sin(angle));
        }
    }
}

void rope_apply_table(float* y, int64_t y_stride, int64_t num_tokens, int64_t feature_begin,
                      int64_t feature_end, const RopeParams& params, const RopeTable& table) {
    for (int64_t t = 0; t < num_tokens; ++t) {
        float* row = y + t * y_stride;
        const float* cos_row = table.cos.data() + t * table.num_pairs;
        const float* sin_row = table.sin.data() + t * table.num_pairs;
        for (int64_t f = feature_begin; f < feature_end; f += 2) {
            const int64_t pair = (f % params.head_dim) / 2;
            if (2 * pair >= params.rope_dim) continue;  // past rope_dim: not rotated
            const float x0 = row[f];
            const float x1 = row[f + 1];
            row[f] = x0 * cos_row[pair] - x1 * sin_row[pair];
            row[f + 1] = x0 * sin_row[pair] + x1 * cos_row[pair];
        }
    }
}

void qkv_matmul_rope(const QuantizedActivations& x, const RepackedMatrix& wq,
                     const RepackedMatrix& wk, const RepackedMatrix& wv, float* q, float* k,
                     float* v, const RopeParams& params, const RopeTable& table) {
    // Checked here: an exception must not leave the parallel region.
    const RepackedMatrix* matrices[] = {&wq, &wk, &wv};
    for (const RepackedMatrix* m : matrices) {
        if (!can_repack(m->type, m->rows, m->cols) || m->cols != x.cols) {
            throw Error("qkv_matmul_rope: needs repacked matrices as wide as x");
        }
    }
    if (params.head_dim % 2 != 0 || table.num_tokens < x.num_tokens ||
        table.num_pairs != params.rope_dim / 2) {
        throw Error("qkv_matmul_rope: needs an even head_dim and a table for the step");
    }
    float* outputs[] = {q, k, v};
    const bool rotated[] = {true, true, false};
    int64_t total_groups = 0;
    for (const RepackedMatrix* m : matrices) total_groups += m->rows / kRepackRows;
#pragma omp parallel
    {
        // One contiguous run of the groups laid end to end per thread.
        const int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t first = total_groups * me / threads;
        const int64_t last = total_groups * (me + 1) / threads;
        int64_t matrix_first = 0;  // where matrix i's groups start in the concatenation
        for (int i = 0; i < 3; ++i) {
            const RepackedMatrix& m = *matrices[i];
            const int64_t groups = m.rows / kRepackRows;
            const int64_t lo = std::max(first, matrix_first) - matrix_first;
            const int64_t hi = std::min(last, matrix_first + groups) - matrix_first;
            for (int64_t g = lo; g < hi; ++g) {
                const int64_t row_begin = g * kRepackRows, row_end = row_begin + kRepackRows;
                quant_matmul_repacked_rows(x, m, outputs[i], row_begin, row_end);
                // The epilogue: the group's T × 16 outputs were just written.
                if (rotated[i]) {
                    rope_apply_table(outputs[i], m.rows, x.num_tokens, row_begin, row_end, params,
                                     table);
                }
            }
            matrix_first += groups;
        }
    }
}

}  // namespace servelab
