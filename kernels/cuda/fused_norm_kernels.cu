// fused_norm_kernels.cu — see fused_norm_kernels.h.
//
// CUDA backend (issue 7; chapter 11.2, the fast versions). Both kernels are
// templated on W, the bf16 values moved per load: 8 (16 bytes, the widest
// load a thread can issue) when the length and every pointer allow it, else
// 2 (bf16x2, 4 bytes), else 1. Memory traffic, not arithmetic, bounds these
// kernels, and wider loads need fewer instructions for the same bytes.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fused_norm_kernels.h"

namespace servelab::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kMaxRowThreads = 256;  // add_rmsnorm: threads per row at most (8 warps)
constexpr int kElementThreads = 256;
constexpr int kDefaultSharedBytes = 48 * 1024;  // available to any block without opting in

// W bf16 values moved as one load or store (aligned to their size, so the
// compiler emits one 16/4/2-byte memory instruction).
template <int W>
struct alignas(sizeof(bf16) * W) Pack {
    bf16 v[W];
};

// Sum over the block (a multiple of 32 threads, at most kMaxRowThreads),
// returned to every thread.
__device__ float block_sum(float value) {
    __shared__ float warp_sums[kMaxRowThreads / 32];
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < int(blockDim.x) / 32; ++w) total += warp_sums[w];
    __syncthreads();
    return total;
}

// One block per row, in two phases over the row's W-wide packs:
//  1. new residual = bf16(residual + delta), written back and staged in
//     shared memory; the sum of squares of the ROUNDED values (what the
//     unfused RMSNorm reads) accumulates in fp32;
//  2. out = staged * inv_rms * weight, from shared memory, not DRAM.
// Each thread handles the same packs in both phases, so it reads back only
// what it staged itself; block_sum's barriers order the rest.
template <int W>
__global__ void add_rmsnorm_kernel(bf16* residual, const bf16* delta, const bf16* weight, bf16* out,
                                   int64_t dim, float eps) {
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    Pack<W>* staged = reinterpret_cast<Pack<W>*>(shared_bytes);
    const int64_t row_offset = int64_t(blockIdx.x) * dim;
    const int64_t packs = dim / W;  // W divides dim (the host checked)
    Pack<W>* row = reinterpret_cast<Pack<W>*>(residual + row_offset);
    const Pack<W>* add = delta ? reinterpret_cast<const Pack<W>*>(delta + row_offset) : nullptr;

    float sum_squares = 0.0f;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
        Pack<W> x = row[p];
        if (add != nullptr) {
            const Pack<W> d = add[p];
#pragma unroll
            for (int j = 0; j < W; ++j)
                x.v[j] = __float2bfloat16(__bfloat162float(x.v[j]) + __bfloat162float(d.v[j]));
            row[p] = x;
        }
        staged[p] = x;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const float v = __bfloat162float(x.v[j]);
            sum_squares += v * v;
        }
    }
    const float inv_rms = rsqrtf(block_sum(sum_squares) / float(dim) + eps);

    const Pack<W>* scale = reinterpret_cast<const Pack<W>*>(weight);
    Pack<W>* normed = reinterpret_cast<Pack<W>*>(out + row_offset);
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
        const Pack<W> x = staged[p];
        const Pack<W> w = scale[p];
        Pack<W> y;
#pragma unroll
        for (int j = 0; j < W; ++j) {
            // Same order as the plain kernel: (x * inv_rms) * weight.
            y.v[j] =
                __float2bfloat16(__bfloat162float(x.v[j]) * inv_rms * __bfloat162float(w.v[j]));
        }
        normed[p] = y;
    }
}

__device__ bf16 silu_mul(bf16 gate, bf16 up) {
    const float g = __bfloat162float(gate);
    return __float2bfloat16(g / (1.0f + __expf(-g)) * __bfloat162float(up));
}

// A grid-stride loop over the W-wide packs, then the last n % W values
// (fewer than one pack) one per thread.
template <int W>
__global__ void silu_mul_fast_kernel(const bf16* gate, const bf16* up, bf16* out, int64_t n) {
    const int64_t packs = n / W;
    const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    const Pack<W>* g = reinterpret_cast<const Pack<W>*>(gate);
    const Pack<W>* u = reinterpret_cast<const Pack<W>*>(up);
    Pack<W>* o = reinterpret_cast<Pack<W>*>(out);
    for (int64_t p = first; p < packs; p += stride) {
        const Pack<W> gp = g[p], up_pack = u[p];
        Pack<W> result;
#pragma unroll
        for (int j = 0; j < W; ++j) result.v[j] = silu_mul(gp.v[j], up_pack.v[j]);
        o[p] = result;
    }
    const int64_t tail = packs * W + first;
    if (tail < n) out[tail] = silu_mul(gate[tail], up[tail]);
}

bool aligned_to(const void* pointer, size_t bytes) {
    return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

// The widest pack (8, 2 or 1 values) that divides `length` and that every
// pointer is aligned for (nullptr counts as aligned).
int pack_width(int64_t length, std::initializer_list<const void*> pointers) {
    for (int width : {8, 2}) {
        const bool fits = std::all_of(pointers.begin(), pointers.end(), [&](const void* p) {
            return aligned_to(p, sizeof(bf16) * size_t(width));
        });
        if (length % width == 0 && fits) return width;
    }
    return 1;
}

template <int W>
void launch_add_rmsnorm(bf16* residual, const bf16* delta, const bf16* weight, bf16* out,
                        int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
    // Threads: enough for one pack each (whole warps), at most kMaxRowThreads;
    // a 576-wide row in packs of 8 is 72 packs, so 96 threads.
    const int64_t packs = dim / W;
    const int threads = int(std::min<int64_t>(kMaxRowThreads, (packs + 31) / 32 * 32));
    const int64_t shared_bytes = (dim * int64_t(sizeof(bf16)) + 15) / 16 * 16;
    if (shared_bytes > kDefaultSharedBytes) {
        SERVELAB_CUDA_CHECK(cudaFuncSetAttribute(
            add_rmsnorm_kernel<W>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));
    }
    add_rmsnorm_kernel<W><<<unsigned(rows), threads, size_t(shared_bytes), stream>>>(
        residual, delta, weight, out, dim, eps);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

template <int W>
void launch_silu_mul(const bf16* gate, const bf16* up, bf16* out, int64_t n, cudaStream_t stream) {
    // Enough blocks for one pack per thread, capped: the grid-stride loop
    // covers the rest (a few waves on any GPU are plenty to saturate memory).
    const int64_t packs = std::max<int64_t>(n / W, 1);
    const int64_t blocks = std::min<int64_t>((packs + kElementThreads - 1) / kElementThreads, 8192);
    silu_mul_fast_kernel<W><<<unsigned(blocks), kElementThreads, 0, stream>>>(gate, up, out, n);
    SERVELAB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void add_rmsnorm_bf16(bf16* residual, const bf16* delta, const bf16* weight, bf16* out,
                      int64_t rows, int64_t dim, float eps, cudaStream_t stream) {
    if (rows == 0 || dim == 0) return;
    // Rows start every dim values, so a pack width must divide dim for every
    // row (not just the first) to stay aligned.
    switch (pack_width(dim, {residual, delta, weight, out})) {
        case 8:
            return launch_add_rmsnorm<8>(residual, delta, weight, out, rows, dim, eps, stream);
        case 2:
            return launch_add_rmsnorm<2>(residual, delta, weight, out, rows, dim, eps, stream);
        default:
            return launch_add_rmsnorm<1>(residual, delta, weight, out, rows, dim, eps, stream);
    }
}

void silu_mul_fast_bf16(const bf16* gate, const bf16* up, bf16* out, int64_t n,
                        cudaStream_t stream) {
    if (n == 0) return;
    // n need not divide: the tail goes one value at a time. Only the
    // pointers decide (a view starting at an odd element gets W = 1).
    switch (pack_width(8, {gate, up, out})) {
        case 8:
            return launch_silu_mul<8>(gate, up, out, n, stream);
        case 2:
            return launch_silu_mul<2>(gate, up, out, n, stream);
        default:
            return launch_silu_mul<1>(gate, up, out, n, stream);
    }
}

}  // namespace servelab::cuda
