// streamed_q4_1.h — Q4_1 weight matrices read from memory, not from cache.
//
// Lab 8 (the kernels lab): decode reads every weight once per token, so a
// GEMV timed on one matrix that stays in cache measures the wrong thing. A
// StreamedQ4_1 is one buffer of twice the last-level cache (at least
// 64 MiB); next(rows, cols) hands out consecutive matrices of that shape
// from it, wrapping around at its end, so each byte has left the caches
// before it is read again. Random codes, the same finite fp16 d and m in
// every block (any Q4_1 shape's blocks fall on the buffer's 20-byte grid):
// the speed does not depend on the values.
// Used by tests/bench/gemv_steps_bench.cpp and tools/labkit/gemv_speed.cpp.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quant_matmul.h"

namespace servelab {

// Bytes of the last-level cache (sysconf), or 0 where the system does not say.
inline int64_t last_level_cache_bytes() {
    int64_t bytes = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    bytes = std::max<int64_t>(bytes, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
    bytes = std::max<int64_t>(bytes, sysconf(_SC_LEVEL2_CACHE_SIZE));
#endif
    return bytes;
}

class StreamedQ4_1 {
  public:
    StreamedQ4_1() {
        const int64_t pool = std::max<int64_t>(2 * last_level_cache_bytes(), int64_t(64) << 20);
        bytes_.resize(size_t(pool / 20 * 20));
        uint64_t state = 0x9E3779B97F4A7C15ull;  // xorshift64: fast enough for ~0.5 GB
        for (size_t i = 0; i + 8 <= bytes_.size(); i += 8) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            for (int k = 0; k < 8; ++k) bytes_[i + size_t(k)] = uint8_t(state >> (8 * k));
        }
        // fp16 0x2000 (about 0.0078) for d and m at the start of every block.
        for (size_t b = 0; b < bytes_.size(); b += 20) {
            bytes_[b] = 0x00, bytes_[b + 1] = 0x20, bytes_[b + 2] = 0x00, bytes_[b + 3] = 0x20;
        }
    }

    // The next (rows, cols) matrix of the buffer (the first again after its end).
    QuantMatrix next(int64_t rows, int64_t cols) {
        const int64_t row_bytes = row_size_bytes(GgmlType::kQ4_1, cols);
        if (next_ + rows * row_bytes > int64_t(bytes_.size())) next_ = 0;
        const uint8_t* data = bytes_.data() + next_;
        next_ += rows * row_bytes;
        return {GgmlType::kQ4_1, data, rows, cols, row_bytes};
    }

    int64_t bytes() const { return int64_t(bytes_.size()); }

  private:
    int64_t next_ = 0;  // byte offset of the next matrix
    std::vector<uint8_t> bytes_;
};

}  // namespace servelab
