// sampling_kernels.cu — see sampling_kernels.h. One thread block turns one logits row into one
// token.
//
// CUDA backend (issue 7; chapter: decoding strategies). The CPU Sampler
// sorts the candidates; a GPU block does not have to. Every filter keeps a
// PREFIX of one fixed order — larger scaled logit first, lower id first
// among equal logits (keep_top_k's order) — so a filter's result is a
// threshold plus a tie rule (struct Prefix), found by bisection with
// block-wide counts and sums instead of a sort:
//   top-k: the k-th token's logit is the largest t with count(logit >= t) >= k;
//   top-p: the last kept token's logit is the largest t with mass(logit >= t) >= top_p;
//   ties at the threshold: the lowest ids, as many as the CPU would take.
// Logits are bisected as 32-bit integer keys that sort like the floats
// (order_key), so a search takes at most 32 passes over the row, each an
// exact count or a fixed-order sum: the same inputs always give the same
// token (no floating-point atomics anywhere).
//
// Assumed, as on the CPU: no NaN logits and a finite largest scaled logit
// (a NaN or an infinite maximum makes the softmax NaN there too).
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling_kernels.h"

namespace servelab::cuda {
namespace {

constexpr int kThreads = 1024;  // one block per sample: a whole row per block
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Per-warp partial results of the block reductions, and the draw's answer.
struct Scratch {
    double sums[kWarps];
    long long counts[kWarps];
    uint32_t keys[kWarps];
    float floats[kWarps];
    int hit_id;   // smallest id where the draw's target fell
    int last_id;  // largest kept id (the draw's fallback)
};

// Scratch array for each reduced type.
__device__ double* partials(Scratch& s, double) {
    return s.sums;
}
__device__ long long* partials(Scratch& s, long long) {
    return s.counts;
}
__device__ uint32_t* partials(Scratch& s, uint32_t) {
    return s.keys;
}
__device__ float* partials(Scratch& s, float) {
    return s.floats;
}

struct Add {
    template <typename T>
    __device__ T operator()(T a, T b) const {
        return a + b;
    }
};
struct Min {
    template <typename T>
    __device__ T operator()(T a, T b) const {
        return a < b ? a : b;
    }
};
struct Max {
    template <typename T>
    __device__ T operator()(T a, T b) const {
        return a > b ? a : b;
    }
};

// `value` combined over the block, returned to every thread. Warps reduce
// with shuffles, then every thread combines the warp results in the same
// order, so all threads hold the same bits and take the same branches after
// (the bisection loops below depend on that to stay in step at
// __syncthreads). Fixed order also makes sums reproducible run to run.
template <typename T, typename Op>
__device__ T block_reduce(T value, Op op, Scratch& scratch) {
    for (int offset = 16; offset > 0; offset /= 2)
        value = op(value, __shfl_xor_sync(kFullMask, value, offset));
    T* warp_results = partials(scratch, T{});
    if (threadIdx.x % 32 == 0) warp_results[threadIdx.x / 32] = value;
    __syncthreads();
    T result = warp_results[0];
    for (int w = 1; w < kWarps; ++w) result = op(result, warp_results[w]);
    __syncthreads();  // the scratch is reused by the next reduction
    return result;
}

// An unsigned key that sorts like the float: flip the sign bit of positive
// numbers, all bits of negative ones. -0 becomes +0 first, because the CPU
// compares them as equal (a tie), and their bits differ.
__device__ uint32_t order_key(float x) {
    const uint32_t bits = __float_as_uint(x == 0.0f ? 0.0f : x);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ float key_value(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) ? (key ^ 0x80000000u) : ~key);
}

// A prefix of the order "larger key first, lower id first among equal keys":
// the tokens with a larger key than `key`, and those with exactly `key` and
// an id <= last_id. Every filter's kept set is one of these.
struct Prefix {
    uint32_t key;
    int64_t last_id;
};

__device__ bool contains(const Prefix& prefix, uint32_t key, int64_t id) {
    return key > prefix.key || (key == prefix.key && id <= prefix.last_id);
}

// One sample's view of memory: its logits row (read only) and its two
// workspace rows.
struct Row {
    const float* logits;
    float* scaled;  // penalized logits / temperature (the keys come from these)
    float* probs;   // softmax over the top-k set; 0 outside it
    int64_t vocab;
};

// The largest key in [lo, hi] where `holds` is true; `holds(lo)` must be
// true and `holds` must turn false once and stay false as the key grows.
// Each probe is a pass over the row, at most 32 of them.
template <typename Pred>
__device__ uint32_t largest_key_where(uint32_t lo, uint32_t hi, Pred holds) {
    while (lo < hi) {
        const uint32_t mid = lo + uint32_t((uint64_t(hi) - lo + 1) / 2);  // lo < mid <= hi
        if (holds(mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// Tokens with key >= threshold.
__device__ long long count_at_least(const Row& row, uint32_t threshold, Scratch& scratch) {
    long long count = 0;
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads)
        count += order_key(row.scaled[i]) >= threshold ? 1 : 0;
    return block_reduce(count, Add{}, scratch);
}

// Probability mass of the tokens with key >= threshold (0 outside top-k).
// Summed in double, as the CPU's top-p adds them up.
__device__ double mass_at_least(const Row& row, uint32_t threshold, Scratch& scratch) {
    double mass = 0.0;
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads)
        mass += order_key(row.scaled[i]) >= threshold ? double(row.probs[i]) : 0.0;
    return block_reduce(mass, Add{}, scratch);
}

// Tokens with exactly `key` that are inside `within`.
__device__ long long count_tied(const Row& row, uint32_t key, const Prefix& within,
                                Scratch& scratch) {
    long long count = 0;
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
        const uint32_t k = order_key(row.scaled[i]);
        count += (k == key && contains(within, k, i)) ? 1 : 0;
    }
    return block_reduce(count, Add{}, scratch);
}

// The smallest id x such that `need` tokens with exactly `key` (inside
// `within`) have an id <= x: the last of the lowest-id ties a filter keeps.
// Bisection over ids; at least `need` such tokens must exist.
__device__ int64_t last_tied_id(const Row& row, uint32_t key, const Prefix& within, long long need,
                                Scratch& scratch) {
    int64_t lo = 0, hi = row.vocab - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        long long count = 0;
        for (int64_t i = threadIdx.x; i <= mid; i += kThreads) {
            const uint32_t k = order_key(row.scaled[i]);
            count += (k == key && contains(within, k, i)) ? 1 : 0;
        }
        if (block_reduce(count, Add{}, scratch) >= need) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

// scaled = penalized logits / temperature (no division when greedy). The
// penalty reads the ORIGINAL logit, so an id listed twice is still
// penalized once, as on the CPU (the host passes distinct ids anyway).
// Division and multiplication are IEEE-exact here as on the CPU, so the
// scaled logits, and hence greedy and top-k, match the CPU bit for bit.
__device__ void scale_logits(const Row& row, const DeviceSample& sample,
                             const int32_t* penalty_tokens, const uint64_t* mask_words) {
    const bool greedy = sample.temperature == 0.0f;
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads)
        row.scaled[i] = greedy ? row.logits[i] : row.logits[i] / sample.temperature;
    __syncthreads();  // the penalty below overwrites some of these
    const float penalty = sample.repetition_penalty;
    if (penalty != 1.0f) {
        for (int64_t j = sample.penalty_begin + int64_t(threadIdx.x); j < sample.penalty_end;
             j += kThreads) {
            const int64_t id = penalty_tokens[j];
            if (id < 0 || id >= row.vocab) continue;
            const float logit = row.logits[id];
            // Dividing a negative logit would make it MORE likely (Keskar et al., 2019).
            const float penalized = logit > 0.0f ? logit / penalty : logit * penalty;
            row.scaled[id] = greedy ? penalized : penalized / sample.temperature;
        }
    }
    __syncthreads();
    // A constrained request's grammar mask (Lab 12): what it forbids is -inf,
    // so no filter below can keep it and its probability is exactly 0.
    if (sample.mask_offset >= 0) {
        const uint64_t* mask = mask_words + sample.mask_offset;
        for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
            if (((mask[i >> 6] >> (i & 63)) & 1) == 0) row.scaled[i] = -INFINITY;
        }
        __syncthreads();
    }
}

// The first id with the largest key: argmax, lowest id among ties.
__device__ int64_t first_id_with_key(const Row& row, uint32_t key, Scratch& scratch) {
    uint32_t first = uint32_t(row.vocab);
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
        if (order_key(row.scaled[i]) == key) {
            first = uint32_t(i);
            break;  // this thread's later ids are larger
        }
    }
    return block_reduce(first, Min{}, scratch);
}

// top-k as a Prefix: exactly the CPU's k tokens (the lowest ids among ties
// at the k-th logit). `all` is the prefix holding every token.
__device__ Prefix top_k_prefix(const Row& row, int64_t k, const Prefix& all, uint32_t max_key,
                               Scratch& scratch) {
    if (k <= 0 || k >= row.vocab) return all;
    // The k-th token's key: the largest t with at least k tokens at or above t.
    const uint32_t key = largest_key_where(
        all.key, max_key, [&](uint32_t t) { return count_at_least(row, t, scratch) >= k; });
    const long long above = key == max_key ? 0 : count_at_least(row, key + 1, scratch);
    const long long tied = count_at_least(row, key, scratch) - above;
    const long long need = k - above;  // 1 <= need <= tied, by the choice of key
    if (need >= tied) return {key, row.vocab - 1};
    return {key, last_tied_id(row, key, all, need, scratch)};
}

// Softmax over the top-k set into row.probs (0 elsewhere), the CPU's way:
// exp of (logit - max) in fp32, the sum in double, p = float(e / sum).
// Returns the largest probability, float(1 / sum).
__device__ float softmax_over(const Row& row, const Prefix& top_k, float max_scaled,
                              Scratch& scratch) {
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
        const float s = row.scaled[i];
        if (contains(top_k, order_key(s), i)) sum += double(expf(s - max_scaled));
    }
    sum = block_reduce(sum, Add{}, scratch);
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
        const float s = row.scaled[i];
        row.probs[i] =
            contains(top_k, order_key(s), i) ? float(double(expf(s - max_scaled)) / sum) : 0.0f;
    }
    __syncthreads();  // probs are read by other threads from here on
    return float(1.0 / sum);
}

// top-p as a Prefix inside top_k: the shortest most-likely-first prefix
// whose mass reaches top_p. The CPU adds probabilities in order until the
// sum reaches top_p, so the last token kept has the largest key t with
// mass(key >= t) >= top_p; among the tokens tied at t (all with the same
// probability) it takes as many, lowest ids first, as the sum still needs.
__device__ Prefix top_p_prefix(const Row& row, float top_p, const Prefix& top_k, uint32_t max_key,
                               Scratch& scratch) {
    if (top_p >= 1.0f) return top_k;
    const double target = top_p;
    // The whole top-k set short of top_p (rounding): the CPU keeps all of it.
    if (mass_at_least(row, top_k.key, scratch) < target) return top_k;
    const uint32_t key = largest_key_where(
        top_k.key, max_key, [&](uint32_t t) { return mass_at_least(row, t, scratch) >= target; });
    const double above = key == max_key ? 0.0 : mass_at_least(row, key + 1, scratch);
    const long long tied = count_tied(row, key, top_k, scratch);
    float tied_prob = 0.0f;
    for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads)
        if (order_key(row.scaled[i]) == key) tied_prob = fmaxf(tied_prob, row.probs[i]);
    tied_prob = block_reduce(tied_prob, Max{}, scratch);  // > 0: the tied tokens carry mass
    // The fewest tied tokens that bring `above` (< top_p) up to top_p.
    const double need_real = ceil((target - above) / double(tied_prob));
    const long long need =
        need_real < 1.0 ? 1 : (need_real >= double(tied) ? tied : (long long)need_real);
    if (need >= tied) return {key, row.vocab - 1};  // intersected with top_k when drawing
    return {key, last_tied_id(row, key, top_k, need, scratch)};
}

// Everything the draw needs to tell whether a token survived the filters.
struct Kept {
    Prefix top_k;
    Prefix top_p;
    float min_prob;  // min-p: min_p * p_max (0 = off)
};

__device__ bool survives(const Row& row, const Kept& kept, int64_t i) {
    const uint32_t key = order_key(row.scaled[i]);
    return contains(kept.top_k, key, i) && contains(kept.top_p, key, i) &&
           row.probs[i] >= kept.min_prob;
}

// The draw: target = uniform * (kept mass); walking the kept tokens in
// vocabulary order, the first whose running sum exceeds the target. Each
// warp owns a contiguous slice of the vocabulary: it sums its slice, the
// slices' sums give each warp its starting offset, then each warp walks its
// slice 32 tokens at a time with a shuffle prefix sum, stopping at its
// first hit. The lowest hit over all warps is the token; with no hit at all
// (rounding left the target at the very end) the last kept token is.
__device__ int64_t draw_in_vocab_order(const Row& row, const Kept& kept, double uniform,
                                       Scratch& scratch) {
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int64_t slice = (row.vocab + kWarps - 1) / kWarps;
    const int64_t begin = min(row.vocab, warp * slice);
    const int64_t end = min(row.vocab, begin + slice);

    double mass = 0.0;
    for (int64_t i = begin + lane; i < end; i += 32)
        mass += survives(row, kept, i) ? double(row.probs[i]) : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) mass += __shfl_xor_sync(kFullMask, mass, offset);
    if (lane == 0) scratch.sums[warp] = mass;
    if (threadIdx.x == 0) {
        scratch.hit_id = INT_MAX;
        scratch.last_id = -1;
    }
    __syncthreads();
    double offset = 0.0, remaining = 0.0;  // same order for both, so offsets add up to remaining
    for (int w = 0; w < kWarps; ++w) {
        if (w == warp) offset = remaining;
        remaining += scratch.sums[w];
    }
    const double target = uniform * remaining;

    double running = offset;  // kept mass before this step's 32 tokens
    int64_t last_kept = -1;
    for (int64_t base = begin; base < end; base += 32) {
        const int64_t i = base + lane;
        const bool keep = i < end && survives(row, kept, i);
        double cumulative = keep ? double(row.probs[i]) : 0.0;
        for (int step = 1; step < 32; step *= 2) {  // inclusive prefix sum over the lanes
            const double before = __shfl_up_sync(kFullMask, cumulative, step);
            if (lane >= step) cumulative += before;
        }
        if (keep) last_kept = i;
        const unsigned hits = __ballot_sync(kFullMask, keep && target < running + cumulative);
        if (hits != 0) {  // the same in every lane: the warp leaves together
            if (lane == 0) atomicMin(&scratch.hit_id, int(base) + __ffs(int(hits)) - 1);
            break;
        }
        running += __shfl_sync(kFullMask, cumulative, 31);
    }
    if (last_kept >= 0) atomicMax(&scratch.last_id, int(last_kept));
    __syncthreads();
    const int64_t token = scratch.hit_id != INT_MAX ? scratch.hit_id : scratch.last_id;
    return token >= 0 ? token : 0;  // never empty: the most likely token always survives
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, const DeviceSample* samples, const int32_t* penalty_tokens,
                  const uint64_t* mask_words, int32_t* out_tokens, int64_t vocab,
                  float* workspace) {
    __shared__ Scratch scratch;
    const DeviceSample sample = samples[blockIdx.x];
    float* own_workspace = workspace + int64_t(blockIdx.x) * 2 * vocab;
    const Row row{logits + int64_t(sample.logits_row) * vocab, own_workspace, own_workspace + vocab,
                  vocab};
    scale_logits(row, sample, penalty_tokens, mask_words);

    // min_key over the tokens the mask left (all, unconstrained): the prefix
    // of "every token" below must not reach the masked ones.
    uint32_t min_key = UINT32_MAX, max_key = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
        const uint32_t key = order_key(row.scaled[i]);
        if (row.scaled[i] != -INFINITY) min_key = min(min_key, key);
        max_key = max(max_key, key);
    }
    min_key = block_reduce(min_key, Min{}, scratch);
    max_key = block_reduce(max_key, Max{}, scratch);

    int64_t token = 0;
    if (sample.temperature == 0.0f) {
        token = first_id_with_key(row, max_key, scratch);
    } else {
        const Prefix all{min_key, vocab - 1};
        Kept kept{};
        kept.top_k = top_k_prefix(row, sample.top_k, all, max_key, scratch);
        const float max_prob = softmax_over(row, kept.top_k, key_value(max_key), scratch);
        kept.top_p = top_p_prefix(row, sample.top_p, kept.top_k, max_key, scratch);
        // min-p (Nguyen et al., 2024): the CPU's threshold, min_p * p_max in fp32.
        kept.min_prob = sample.min_p > 0.0f ? sample.min_p * max_prob : 0.0f;
        token = draw_in_vocab_order(row, kept, sample.uniform, scratch);
    }
    if (threadIdx.x == 0) out_tokens[blockIdx.x] = int32_t(token);
}

}  // namespace

int64_t sampling_workspace_floats(int64_t num_samples, int64_t vocab_size) {
    return num_samples * 2 * vocab_size;  // per sample: scaled logits, then probabilities
}

void sample_tokens(const float* logits, const DeviceSample* samples, const int32_t* penalty_tokens,
                   const uint64_t* mask_words, int32_t* out_tokens, int64_t num_samples,
                   int64_t vocab_size, float* workspace, cudaStream_t stream) {
    if (num_samples == 0) return;
    if (vocab_size <= 0 || vocab_size > INT32_MAX) {
        throw Error("sample_tokens: vocab_size must be in [1, 2^31)");
    }
    sample_kernel<<<unsigned(num_samples), kThreads, 0, stream>>>(
        logits, samples, penalty_tokens, mask_words, out_tokens, vocab_size, workspace);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace servelab::cuda
