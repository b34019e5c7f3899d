// quant_matmul_repacked.h — fast mode's weights, repacked at load: one row per lane.
//
// CPU kernel (CPU speed; the kernels lab's "next steps"). quant_matmul_fast
// reads the GGUF blocks as they are stored, one row after another, so each
// block's dot product ends in a horizontal sum and each block's fp16 scale
// is converted on its own. Repacking 16 rows side by side turns that around:
// lane r of a 512-bit register belongs to row r, so one dpbusd adds four
// codes' products for 16 rows at once, the 16 scales convert in one
// instruction, and the 16 outputs land in one register, ready to store. The
// bytes per weight do not change (Q4_1 stays 20 bytes per 32), so decode
// streams exactly as much memory as before, with about a quarter of the
// instructions per byte.
//
// Layout. Rows are taken 16 at a time (a group); a group stores its blocks
// b = 0, 1, ... one after another, each block of the group as
//   Q4_1 (320 B): d[16] fp16 | m[16] fp16 | codes 4 × 64 B
//   Q4_0 (288 B): d[16] fp16 | codes 4 × 64 B            (offset −8·d)
//   Q8_0 (544 B): d[16] fp16 | codes 8 × 64 B, stored +128 (offset −128·d)
// In Q4 chunk j (0..3), byte 4r + i holds row r's code for column 8j + i in
// its low nibble and for column 8j + 4 + i in its high nibble; in Q8 chunk k
// (0..7), byte 4r + i holds row r's code for column 4k + i, plus 128 so that
// dpbusd (unsigned × signed) can take it. Per block and row:
//   Σ w·x ≈ d·d_x·Σ q·c + m·(d_x·Σ c),  m = the Q4_1 offset, −8d or −128d
// the same sums as quant_matmul_fast, so the two agree to float rounding.
//
// Used where the CPU has AVX-512 VNNI and the matrix has a multiple of 16
// rows (every SmolLM2 matrix); elsewhere fast mode keeps the GGUF kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_fast.h"

namespace servelab {

inline constexpr int64_t kRepackRows = 16;  // rows per group: one per 32-bit lane of 512 bits

// A repacked matrix (not owned): `data` holds rows / 16 groups of
// cols / 32 blocks in the layout above.
struct RepackedMatrix {
    GgmlType type = GgmlType::kF32;
    const uint8_t* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
};

// Whether `type` has a repacked layout (Q4_0, Q4_1, Q8_0) and the shape fits it.
bool can_repack(GgmlType type, int64_t rows, int64_t cols);
// Whether this CPU runs the repacked kernel (AVX-512 F/BW/VL + VNNI).
bool cpu_runs_repacked();

// The GGUF rows of `w` in the repacked layout (same number of bytes).
std::vector<uint8_t> repack_rows(const QuantMatrix& w);

// y (x.num_tokens, w.rows) = activations · Wᵀ for rows [row_begin, row_end)
// only (multiples of 16), on the calling thread. y's row stride is w.rows.
// `portable` runs the plain loops over the same layout (any CPU; tests).
void quant_matmul_repacked_rows(const QuantizedActivations& x, const RepackedMatrix& w, float* y,
                                int64_t row_begin, int64_t row_end, bool portable = false);

// All rows, split over the OpenMP threads in runs of whole groups.
void quant_matmul_repacked(const QuantizedActivations& x, const RepackedMatrix& w, float* y);

}  // namespace servelab
