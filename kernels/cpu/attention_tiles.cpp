// attention_tiles.cpp — see attention_tiles.h.
#include "kernels/cpu/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SERVELAB_X86 1
#endif

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

void exp_in_place_plain(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] < kExpFloor ? 0.0f : std::exp(x[i]);
}

#if SERVELAB_X86
// GCC 12 warns inside its own AVX-512 headers (the reductions' undefined
// upper halves); the values are never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SERVELAB_AVX512 __attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl")))

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

SERVELAB_AVX512 void exp_in_place_avx512(float* x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const int64_t left = std::min<int64_t>(16, n - i);
        const __mmask16 lanes = left == 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        _mm512_mask_storeu_ps(x + i, lanes, exp_avx512(_mm512_maskz_loadu_ps(lanes, x + i)));
    }
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

// head_dim = 16 · kVecs. Key row jj is loaded once into registers and dotted
// with every row's query (from L1); each score is one register of products
// summed across its lanes.
template <int kVecs>
SERVELAB_AVX512 void tile_scores_avx512(const QueryRows& rows, const KvRows& kv, int64_t first_key,
                                        int64_t num_keys, float* scores) {
    prefetch_next_tile<kVecs>(kv, kv.keys, first_key);
    for (int64_t jj = 0; jj < num_keys; ++jj) {
        const float* k = kv.keys + kv.pool_row[first_key + jj] * kv.row_stride;
        __m512 key[kVecs];
        for (int v = 0; v < kVecs; ++v) key[v] = _mm512_loadu_ps(k + 16 * v);
        for (int64_t r = 0; r < rows.num_rows; ++r) {
            const float* q = rows.q + r * 16 * kVecs;
            __m512 dot = _mm512_mul_ps(_mm512_loadu_ps(q), key[0]);
            for (int v = 1; v < kVecs; ++v) {
                dot = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * v), key[v], dot);
            }
            scores[r * kKeyTile + jj] = _mm512_reduce_add_ps(dot);
        }
    }
    for (int64_t r = 0; r < rows.num_rows; ++r) {
        std::fill(scores + r * kKeyTile + num_keys, scores + (r + 1) * kKeyTile, kMinusInfinity);
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
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
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

void exp_in_place(float* x, int64_t n) {
#if SERVELAB_X86
    if (runs_avx512()) return exp_in_place_avx512(x, n);
#endif
    exp_in_place_plain(x, n);
}

}  // namespace servelab
