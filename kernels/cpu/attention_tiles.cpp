// attention_tiles.cpp — see attention_tiles.h.
#include "kernels/cpu/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/simd.h"

namespace servelab {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
// Below this, e^x is under float's smallest normal number: taken as 0.
constexpr float kExpFloor = -87.0f;

void tile_scores_plain(const QueryRows& rows, const KvRows& kv, int64_t first_key, int64_t num_keys,
                       float* scores) {
    for (int64_t r = 0; r < rows.num_rows; ++r) {
        const float* q = rows.q + r * kv.head_dim;
        float* row_scores = scores + r * kKeyTile;
        for (int64_t jj = 0; jj < num_keys; ++jj) {
            const float* k = kv.keys + kv.pool_row[first_key + jj] * kv.row_stride;
            float dot = 0.0f;
            for (int64_t d = 0; d < kv.head_dim; ++d) dot += q[d] * k[d];
            row_scores[jj] = dot;
        }
        std::fill(row_scores + num_keys, row_scores + kKeyTile, kMinusInfinity);
    }
}

void tile_accumulate_plain(const float* weights, const int64_t* live, const KvRows& kv,
                           int64_t first_key, int64_t num_rows, float* out) {
    for (int64_t r = 0; r < num_rows; ++r) {
        float* o = out + r * kv.head_dim;
        for (int64_t jj = 0; jj < live[r]; ++jj) {
            const float w = weights[r * kKeyTile + jj];
            const float* v = kv.values + kv.pool_row[first_key + jj] * kv.row_stride;
            for (int64_t d = 0; d < kv.head_dim; ++d) o[d] += w * v[d];
        }
    }
}

float exp_in_place_plain(float* x, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = x[i] < kExpFloor ? 0.0f : std::exp(x[i]);
        sum += x[i];
    }
    return sum;
}

float max_of_plain(const float* x, int64_t n) {
    float largest = kMinusInfinity;
    for (int64_t i = 0; i < n; ++i) largest = std::max(largest, x[i]);
    return largest;
}

#if SERVELAB_X86
// GCC 12 warns inside its own AVX-512 headers (the reductions' undefined
// upper halves); the values are never read.
SERVELAB_BEGIN_AVX512_SECTION

// e^x, 16 at a time: e^x = 2^n · e^r with n = round(x / ln 2) and |r| <= ln(2) / 2,
// e^r by its Taylor polynomial to r^6 (remainder under 2e-7 relative: float's
// own rounding); exactly 0 below kExpFloor. max(floor, x) keeps a NaN a NaN.
SERVELAB_AVX512 inline __m512 exp_avx512(__m512 x) {
    const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpFloor), _CMP_LT_OQ);
    x = _mm512_max_ps(_mm512_set1_ps(kExpFloor), x);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // ln 2 in two parts, so n · ln2_high is exact and r keeps its low bits.
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_mask_mov_ps(_mm512_scalef_ps(p, n), underflow, _mm512_setzero_ps());
}

// Lanes past n are loaded as −inf: their e^x is 0, and adds nothing.
SERVELAB_AVX512 float exp_in_place_avx512(float* x, int64_t n) {
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const int64_t left = std::min<int64_t>(16, n - i);
        const __mmask16 lanes = left == 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        const __m512 e =
            exp_avx512(_mm512_mask_loadu_ps(_mm512_set1_ps(kMinusInfinity), lanes, x + i));
        _mm512_mask_storeu_ps(x + i, lanes, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

SERVELAB_AVX512 float max_of_avx512(const float* x, int64_t n) {
    __m512 largest = _mm512_set1_ps(kMinusInfinity);
    for (int64_t i = 0; i < n; i += 16) {
        const int64_t left = std::min<int64_t>(16, n - i);
        const __mmask16 lanes = left == 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        largest = _mm512_max_ps(largest,
                                _mm512_mask_loadu_ps(_mm512_set1_ps(kMinusInfinity), lanes, x + i));
    }
    return _mm512_reduce_max_ps(largest);
}

// Asks for the `lines` 64-byte lines of one row. The next tile's rows are in
// another block of the pool, somewhere else in memory: the hardware
// prefetcher does not guess the jump.
SERVELAB_AVX512 inline void prefetch_row(const float* row, int lines) {
    for (int i = 0; i < lines; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(row + 16 * i), _MM_HINT_T0);
    }
}

// The next tile's rows, from `pool` (keys or values).
template <int kVecs>
SERVELAB_AVX512 inline void prefetch_next_tile(const KvRows& kv, const float* pool,
                                               int64_t first_key) {
    const int64_t next = first_key + kKeyTile;
    const int64_t num_next = std::clamp<int64_t>(kv.num_keys - next, 0, kKeyTile);
    for (int64_t jj = 0; jj < num_next; ++jj) {
        prefetch_row(pool + kv.pool_row[next + jj] * kv.row_stride, kVecs);
    }
}

// lo[i] / hi[i]: the lanes of (a, b) that one step of sum_lanes_of_16 adds
// (indices 16 and up are b's lanes).
struct LanePairs {
    alignas(64) int32_t lo[16];
    alignas(64) int32_t hi[16];
};
// Step s halves the partial sums per key: a lane's pair is 8, 4, 2, 1 lanes away.
constexpr LanePairs kHalvingSteps[4] = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
     {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
     {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}},
    {{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
     {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31}},
    {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
     {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}},
};

SERVELAB_AVX512 inline __m512 add_lane_pairs(__m512 a, __m512 b, int step) {
    const __m512i lo = _mm512_load_si512(kHalvingSteps[step].lo);
    const __m512i hi = _mm512_load_si512(kHalvingSteps[step].hi);
    return _mm512_add_ps(_mm512_permutex2var_ps(a, lo, b), _mm512_permutex2var_ps(a, hi, b));
}

// sums[jj] = the 16 lanes of v[jj] added up, for 16 registers at once: four
// halving steps of 8, 4, 2, 1 permute-and-adds (15 in all) instead of a
// horizontal sum per register (about 4 shuffles and 4 adds each). The last
// step leaves key jj in lane jj. The order of the additions is fixed, so a
// score's bits depend on its query and key only.
SERVELAB_AVX512 inline __m512 sum_lanes_of_16(__m512 (&v)[16]) {
    __m512 x[8], y[4], z[2];
    for (int i = 0; i < 8; ++i) x[i] = add_lane_pairs(v[2 * i], v[2 * i + 1], 0);
    for (int i = 0; i < 4; ++i) y[i] = add_lane_pairs(x[2 * i], x[2 * i + 1], 1);
    for (int i = 0; i < 2; ++i) z[i] = add_lane_pairs(y[2 * i], y[2 * i + 1], 2);
    return add_lane_pairs(z[0], z[1], 3);
}

// head_dim = 16 · kVecs. For each row, the 16 keys' lane-wise products with
// the row's query (kVecs multiply-adds per key, the key rows read from L1
// after the first row), then sum_lanes_of_16 turns the 16 registers into one
// register of 16 scores.
template <int kVecs>
SERVELAB_AVX512 void tile_scores_avx512(const QueryRows& rows, const KvRows& kv, int64_t first_key,
                                        int64_t num_keys, float* scores) {
    prefetch_next_tile<kVecs>(kv, kv.keys, first_key);
    const float* key_rows[kKeyTile];
    for (int64_t jj = 0; jj < num_keys; ++jj) {
        key_rows[jj] = kv.keys + kv.pool_row[first_key + jj] * kv.row_stride;
    }
    const __mmask16 past_the_tile = __mmask16(~((1u << num_keys) - 1));
    for (int64_t r = 0; r < rows.num_rows; ++r) {
        __m512 q[kVecs];
        for (int v = 0; v < kVecs; ++v) q[v] = _mm512_loadu_ps(rows.q + r * 16 * kVecs + 16 * v);
        __m512 products[kKeyTile];
#pragma GCC unroll 16
        for (int jj = 0; jj < int(kKeyTile); ++jj) {
            if (jj >= num_keys) {
                products[jj] = _mm512_setzero_ps();
                continue;
            }
            __m512 p = _mm512_mul_ps(q[0], _mm512_loadu_ps(key_rows[jj]));
            for (int v = 1; v < kVecs; ++v) {
                p = _mm512_fmadd_ps(q[v], _mm512_loadu_ps(key_rows[jj] + 16 * v), p);
            }
            products[jj] = p;
        }
        const __m512 row_scores = _mm512_mask_mov_ps(sum_lanes_of_16(products), past_the_tile,
                                                     _mm512_set1_ps(kMinusInfinity));
        _mm512_storeu_ps(scores + r * kKeyTile, row_scores);
    }
}

// Rows two at a time: each value register loaded serves both, and the two
// rows' chains of multiply-adds overlap. A row's own sum runs in key order
// either way, so its bits do not depend on its neighbour.
template <int kVecs>
SERVELAB_AVX512 void tile_accumulate_avx512(const float* weights, const int64_t* live,
                                            const KvRows& kv, int64_t first_key, int64_t num_rows,
                                            float* out) {
    prefetch_next_tile<kVecs>(kv, kv.values, first_key);
    constexpr int64_t d = 16 * kVecs;
    const auto value_row = [&](int64_t jj) {
        return kv.values + kv.pool_row[first_key + jj] * kv.row_stride;
    };
    int64_t r = 0;
    for (; r + 1 < num_rows; r += 2) {
        __m512 a[kVecs], b[kVecs];
        for (int v = 0; v < kVecs; ++v) {
            a[v] = _mm512_loadu_ps(out + r * d + 16 * v);
            b[v] = _mm512_loadu_ps(out + (r + 1) * d + 16 * v);
        }
        const float* wa = weights + r * kKeyTile;
        const float* wb = wa + kKeyTile;
        const int64_t both = std::min(live[r], live[r + 1]);
        int64_t jj = 0;
        for (; jj < both; ++jj) {
            const float* row = value_row(jj);
            const __m512 ua = _mm512_set1_ps(wa[jj]), ub = _mm512_set1_ps(wb[jj]);
            for (int v = 0; v < kVecs; ++v) {
                const __m512 value = _mm512_loadu_ps(row + 16 * v);
                a[v] = _mm512_fmadd_ps(ua, value, a[v]);
                b[v] = _mm512_fmadd_ps(ub, value, b[v]);
            }
        }
        for (int64_t ja = jj; ja < live[r]; ++ja) {
            const __m512 ua = _mm512_set1_ps(wa[ja]);
            for (int v = 0; v < kVecs; ++v) {
                a[v] = _mm512_fmadd_ps(ua, _mm512_loadu_ps(value_row(ja) + 16 * v), a[v]);
            }
        }
        for (int64_t jb = jj; jb < live[r + 1]; ++jb) {
            const __m512 ub = _mm512_set1_ps(wb[jb]);
            for (int v = 0; v < kVecs; ++v) {
                b[v] = _mm512_fmadd_ps(ub, _mm512_loadu_ps(value_row(jb) + 16 * v), b[v]);
            }
        }
        for (int v = 0; v < kVecs; ++v) {
            _mm512_storeu_ps(out + r * d + 16 * v, a[v]);
            _mm512_storeu_ps(out + (r + 1) * d + 16 * v, b[v]);
        }
    }
    for (; r < num_rows; ++r) {
        __m512 a[kVecs];
        for (int v = 0; v < kVecs; ++v) a[v] = _mm512_loadu_ps(out + r * d + 16 * v);
        const float* wa = weights + r * kKeyTile;
        for (int64_t jj = 0; jj < live[r]; ++jj) {
            const __m512 ua = _mm512_set1_ps(wa[jj]);
            for (int v = 0; v < kVecs; ++v) {
                a[v] = _mm512_fmadd_ps(ua, _mm512_loadu_ps(value_row(jj) + 16 * v), a[v]);
            }
        }
        for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(out + r * d + 16 * v, a[v]);
    }
}
SERVELAB_END_AVX512_SECTION
#endif  // SERVELAB_X86

bool runs_avx512() {
#if SERVELAB_X86
    return simd_level() == SimdLevel::kAvx512;
#else
    return false;
#endif
}

}  // namespace

void SoftmaxRows::reset(int64_t num_rows, int64_t head_dim) {
    max.assign(size_t(num_rows), kMinusInfinity);
    sum.assign(size_t(num_rows), 0.0f);
    out.assign(size_t(num_rows * head_dim), 0.0f);
}

void tile_scores(const QueryRows& rows, const KvRows& kv, int64_t first_key, int64_t num_keys,
                 float* scores) {
#if SERVELAB_X86
    if (runs_avx512()) {
        if (kv.head_dim == 64) return tile_scores_avx512<4>(rows, kv, first_key, num_keys, scores);
        if (kv.head_dim == 128) return tile_scores_avx512<8>(rows, kv, first_key, num_keys, scores);
    }
#endif
    tile_scores_plain(rows, kv, first_key, num_keys, scores);
}

void tile_accumulate(const float* weights, const int64_t* live, const KvRows& kv, int64_t first_key,
                     int64_t num_rows, float* out) {
#if SERVELAB_X86
    if (runs_avx512()) {
        if (kv.head_dim == 64) {
            return tile_accumulate_avx512<4>(weights, live, kv, first_key, num_rows, out);
        }
        if (kv.head_dim == 128) {
            return tile_accumulate_avx512<8>(weights, live, kv, first_key, num_rows, out);
        }
    }
#endif
    tile_accumulate_plain(weights, live, kv, first_key, num_rows, out);
}

float exp_in_place(float* x, int64_t n) {
#if SERVELAB_X86
    if (runs_avx512()) return exp_in_place_avx512(x, n);
#endif
    return exp_in_place_plain(x, n);
}

float max_of(const float* x, int64_t n) {
#if SERVELAB_X86
    if (runs_avx512()) return max_of_avx512(x, n);
#endif
    return max_of_plain(x, n);
}

}  // namespace servelab
