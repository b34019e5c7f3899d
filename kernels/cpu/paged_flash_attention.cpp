// paged_flash_attention.cpp — see paged_flash_attention.h.
#include "kernels/cpu/paged_flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "kernels/cpu/attention_group.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/parallel_for.h"
#include "reference/common/error.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SERVELAB_X86 1
#endif

namespace servelab {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
constexpr int64_t kTile = 16;  // keys per tile: one 512-bit register of scores
static_assert(kKeysPerSplit % kTile == 0);
// Up to this many ranges are spread over the threads one by one, their
// partials kept (about 0.8 KB each for SmolLM2); more, and each (query, KV
// head) runs its ranges on one thread.
constexpr int64_t kMaxKeptPartials = 1024;

// Where an item's keys are and where its (m, l, o) triples go.
struct RangeTask {
    const float* q_t;                // this query token's (num_heads, head_dim)
    std::span<const int64_t> heads;  // the query heads of the KV head
    int64_t head_dim;
    float scale;        // 1 / sqrt(head_dim)
    const float* keys;  // the pool's first row, at this KV head's columns
    const float* values;
    const int64_t* pool_row;  // token j's row in the pool
    int64_t row_stride;       // floats per pool row
    int64_t begin, end;       // keys [begin, end); empty when begin >= end
    float* max;               // per head: m
    float* sum;               // per head: l
    float* out;               // per head: o (head_dim), unnormalized
};

// The online softmax one key at a time, in plain loops: what the AVX-512
// version below does 16 keys at a time.
void attend_range_plain(const RangeTask& task) {
    for (size_t i = 0; i < task.heads.size(); ++i) {
        const float* q = task.q_t + task.heads[i] * task.head_dim;
        float* o = task.out + int64_t(i) * task.head_dim;
        float m = kMinusInfinity;
        float l = 0.0f;
        std::fill(o, o + task.head_dim, 0.0f);
        for (int64_t j = task.begin; j < task.end; ++j) {
            const float* k = task.keys + task.pool_row[j] * task.row_stride;
            const float* v = task.values + task.pool_row[j] * task.row_stride;
            float score = 0.0f;
            for (int64_t d = 0; d < task.head_dim; ++d) score += q[d] * k[d];
            score *= task.scale;
            if (score > m) {
                // The max grew: what was summed against the old max is
                // exp(m_old − m_new) times too large. exp(−inf) = 0 at the first key.
                const float correction = std::exp(m - score);
                l *= correction;
                for (int64_t d = 0; d < task.head_dim; ++d) o[d] *= correction;
                m = score;
            }
            const float p = std::exp(score - m);
            l += p;
            for (int64_t d = 0; d < task.head_dim; ++d) o[d] += p * v[d];
        }
        task.max[i] = m;
        task.sum[i] = l;
    }
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

// e^x for x <= 0, 16 at a time: e^x = 2^n · e^r with n = round(x / ln 2) and
// |r| <= ln(2) / 2, e^r by its Taylor polynomial to r^6 (remainder under
// 2e-7 relative: float's own rounding). Inputs below -87 give about 1e-38.
SERVELAB_AVX512 inline __m512 exp_avx512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
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
    return _mm512_scalef_ps(p, n);
}

// Asks for the kVecs 64-byte lines of one row.
SERVELAB_AVX512 inline void prefetch_row(const float* row, int lines) {
    for (int i = 0; i < lines; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(row + 16 * i), _MM_HINT_T0);
    }
}

// kHeads query heads of one KV head, head_dim = 16 · kVecs. The outputs stay
// in registers for the whole range (kHeads · kVecs of them); each key row
// and value row is loaded once per tile and serves every head.
template <int kVecs, int kHeads>
SERVELAB_AVX512 void attend_range_avx512(const RangeTask& task, const int64_t* heads) {
    alignas(64) float q[kHeads][16 * kVecs];  // the queries, pre-multiplied by the scale
    for (int i = 0; i < kHeads; ++i) {
        const float* q_h = task.q_t + heads[i] * task.head_dim;
        for (int d = 0; d < 16 * kVecs; ++d) q[i][d] = q_h[d] * task.scale;
    }
    __m512 acc[kHeads][kVecs];
    float m[kHeads], l[kHeads];
    for (int i = 0; i < kHeads; ++i) {
        m[i] = kMinusInfinity;
        l[i] = 0.0f;
        for (int v = 0; v < kVecs; ++v) acc[i][v] = _mm512_setzero_ps();
    }
    alignas(64) float scores[kHeads][kTile];
    alignas(64) float weights[kHeads][kTile];
    for (int64_t j0 = task.begin; j0 < task.end; j0 += kTile) {
        const int n = int(std::min(kTile, task.end - j0));
        // The next tile's rows are another block of the pool, somewhere
        // else in memory: ask for them now, so they arrive while this tile
        // computes (the hardware prefetcher does not guess a jump).
        const int64_t next = j0 + kTile;
        const int n_next = int(std::max<int64_t>(0, std::min(kTile, task.end - next)));
        for (int jj = 0; jj < n; ++jj) {
            if (jj < n_next)
                prefetch_row(task.keys + task.pool_row[next + jj] * task.row_stride, kVecs);
            const float* k = task.keys + task.pool_row[j0 + jj] * task.row_stride;
            __m512 key[kVecs];
            for (int v = 0; v < kVecs; ++v) key[v] = _mm512_loadu_ps(k + 16 * v);
            for (int i = 0; i < kHeads; ++i) {
                __m512 dot = _mm512_mul_ps(_mm512_load_ps(q[i]), key[0]);
                for (int v = 1; v < kVecs; ++v) {
                    dot = _mm512_fmadd_ps(_mm512_load_ps(q[i] + 16 * v), key[v], dot);
                }
                scores[i][jj] = _mm512_reduce_add_ps(dot);
            }
        }
        const __mmask16 live = n == kTile ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
        for (int i = 0; i < kHeads; ++i) {
            const __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(kMinusInfinity), live, scores[i]);
            const float m_new = std::max(m[i], _mm512_reduce_max_ps(s));
            const float correction = std::exp(m[i] - m_new);  // 0 at the first tile
            l[i] *= correction;
            for (int v = 0; v < kVecs; ++v) {
                acc[i][v] = _mm512_mul_ps(acc[i][v], _mm512_set1_ps(correction));
            }
            const __m512 p =
                _mm512_maskz_mov_ps(live, exp_avx512(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
            l[i] += _mm512_reduce_add_ps(p);
            _mm512_store_ps(weights[i], p);
            m[i] = m_new;
        }
        for (int jj = 0; jj < n; ++jj) {
            if (jj < n_next) {
                prefetch_row(task.values + task.pool_row[next + jj] * task.row_stride, kVecs);
            }
            const float* row = task.values + task.pool_row[j0 + jj] * task.row_stride;
            __m512 value[kVecs];
            for (int v = 0; v < kVecs; ++v) value[v] = _mm512_loadu_ps(row + 16 * v);
            for (int i = 0; i < kHeads; ++i) {
                const __m512 w = _mm512_set1_ps(weights[i][jj]);
                for (int v = 0; v < kVecs; ++v) acc[i][v] = _mm512_fmadd_ps(w, value[v], acc[i][v]);
            }
        }
    }
    for (int i = 0; i < kHeads; ++i) {
        task.max[heads - task.heads.data() + i] = m[i];
        task.sum[heads - task.heads.data() + i] = l[i];
        float* o = task.out + (heads - task.heads.data() + i) * task.head_dim;
        for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(o + 16 * v, acc[i][v]);
    }
}

// The heads in chunks that fit the registers: 16 output registers at most.
template <int kVecs>
void attend_range_avx512_chunks(const RangeTask& task) {
    constexpr int kMaxHeads = 16 / kVecs;
    const int64_t* heads = task.heads.data();
    int64_t left = int64_t(task.heads.size());
    while (left > 0) {
        const int chunk = int(std::min<int64_t>(left, kMaxHeads));
        if constexpr (kVecs == 4) {
            switch (chunk) {
                case 1:
                    attend_range_avx512<4, 1>(task, heads);
                    break;
                case 2:
                    attend_range_avx512<4, 2>(task, heads);
                    break;
                case 3:
                    attend_range_avx512<4, 3>(task, heads);
                    break;
                default:
                    attend_range_avx512<4, 4>(task, heads);
                    break;
            }
        } else {
            if (chunk == 1) {
                attend_range_avx512<8, 1>(task, heads);
            } else {
                attend_range_avx512<8, 2>(task, heads);
            }
        }
        heads += chunk;
        left -= chunk;
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // SERVELAB_X86

void attend_range(const RangeTask& task) {
#if SERVELAB_X86
    if (cpu_runs_avx512_attention()) {
        if (task.head_dim == 64) return attend_range_avx512_chunks<4>(task);
        if (task.head_dim == 128) return attend_range_avx512_chunks<8>(task);
    }
#endif
    attend_range_plain(task);
}

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

}  // namespace

void paged_flash_attention(const float* q, const float* key_pool, const float* value_pool,
                           const int32_t* block_table, int64_t block_size, float* out,
                           const AttentionShape& s) {
    if (s.num_queries < 1 || s.num_keys < s.num_queries || s.num_kv_heads < 1 ||
        s.num_heads < s.num_kv_heads) {
        throw Error("paged_flash_attention: a malformed attention shape");
    }
    const int64_t q_stride = s.num_heads * s.head_dim;
    const int64_t row_stride = s.num_kv_heads * s.head_dim;
    const int64_t first_query_position = s.num_keys - s.num_queries;
    // This thread's scratch, reused across calls (decode allocates nothing);
    // the worker threads read it through the references.
    thread_local std::vector<int64_t> pool_row_scratch;
    thread_local std::vector<std::vector<int64_t>> readers_scratch;
    thread_local std::vector<float> partial_scratch;
    std::vector<int64_t>& pool_row = pool_row_scratch;
    std::vector<std::vector<int64_t>>& readers = readers_scratch;
    map_pool_rows(block_table, block_size, s.num_keys, pool_row);
    query_heads_by_kv_head(s, readers);

    // Ranges at fixed positions (see the header): the last query sees the
    // most keys, so it has the most ranges; earlier queries' last ranges may
    // be empty, and weigh nothing in the merge.
    const int64_t pairs = s.num_queries * s.num_kv_heads;
    const int64_t splits = ceil_div(s.num_keys, kKeysPerSplit);
    const int64_t keys_per_split = kKeysPerSplit;

    // Per item and head: m, l, then o (head_dim). (A GQA group is
    // num_heads / num_kv_heads heads; the largest is taken in case a head
    // mapping under construction deals them unevenly.)
    int64_t group = 0;
    for (const std::vector<int64_t>& heads : readers)
        group = std::max(group, int64_t(heads.size()));
    const int64_t per_item = group * (2 + s.head_dim);
    const float scale = 1.0f / std::sqrt(float(s.head_dim));
    // Range `split` of (query t, KV head g) into `slot` (per_item floats).
    const auto attend_split = [&](int64_t pair, int64_t split, float* slot) {
        const int64_t t = pair / s.num_kv_heads;
        const int64_t g = pair % s.num_kv_heads;
        const int64_t visible = first_query_position + t + 1;
        const RangeTask task{q + t * q_stride,
                             readers[size_t(g)],
                             s.head_dim,
                             scale,
                             key_pool + g * s.head_dim,
                             value_pool + g * s.head_dim,
                             pool_row.data(),
                             row_stride,
                             split * keys_per_split,
                             std::min(split * keys_per_split + keys_per_split, visible),
                             slot,
                             slot + group,
                             slot + 2 * group};
        attend_range(task);
    };
    // The exact merge of a pair's ranges (`slots`: splits × per_item). Split
    // 0 always holds key 0, which every query sees, so M is finite and L > 0;
    // an empty range has m = −inf and weighs 0.
    const auto merge = [&](int64_t pair, const float* slots) {
        const int64_t t = pair / s.num_kv_heads;
        const std::vector<int64_t>& heads = readers[size_t(pair % s.num_kv_heads)];
        for (size_t i = 0; i < heads.size(); ++i) {
            float max = kMinusInfinity;
            for (int64_t split = 0; split < splits; ++split) {
                max = std::max(max, slots[split * per_item + int64_t(i)]);
            }
            float* o = out + t * q_stride + heads[i] * s.head_dim;
            std::fill(o, o + s.head_dim, 0.0f);
            float total = 0.0f;
            for (int64_t split = 0; split < splits; ++split) {
                const float* slot = slots + split * per_item;
                const float m = slot[i];
                if (m == kMinusInfinity) continue;  // saw no key
                const float weight = std::exp(m - max);
                total += slot[group + int64_t(i)] * weight;
                const float* o_split = slot + 2 * group + int64_t(i) * s.head_dim;
                for (int64_t d = 0; d < s.head_dim; ++d) o[d] += o_split[d] * weight;
            }
            for (int64_t d = 0; d < s.head_dim; ++d) o[d] /= total;
        }
    };

    // Few pairs (decode, verification): every range its own work item, all
    // partials kept, merged after. Many pairs (prefill): a work item per
    // pair runs its ranges one after another into its thread's buffer and
    // merges at once, so memory stays O(threads × T) rather than O(T²).
    // Both do the same arithmetic in the same order: the same bits.
    if (pairs * splits <= kMaxKeptPartials) {
        std::vector<float>& partial = partial_scratch;
        partial.resize(size_t(pairs * splits * per_item));
        parallel_for(pairs * splits, [&](int64_t item) {
            attend_split(item / splits, item % splits, partial.data() + item * per_item);
        });
        for (int64_t pair = 0; pair < pairs; ++pair) {
            merge(pair, partial.data() + pair * splits * per_item);
        }
        return;
    }
    parallel_for(pairs, [&](int64_t pair) {
        thread_local std::vector<float> slots;  // this worker's, reused across calls
        slots.resize(size_t(splits * per_item));
        for (int64_t split = 0; split < splits; ++split) {
            attend_split(pair, split, slots.data() + split * per_item);
        }
        merge(pair, slots.data());
    });
}

}  // namespace servelab
