// tensor_core_ptx.cuh — the warp-level tensor-core instructions, one inline-PTX wrapper each.
//
// Part of the CUDA backend (issue 48; chapter 11.5, FlashAttention-2 on
// tensor cores; Lab 9's GPU track). Ampere and Hopper (sm_80, sm_90) both run
// these: mma.sync is the tensor-core instruction of a single warp (Hopper's
// faster warp-group WGMMA is not used: this project cannot verify it). Each
// wrapper is the PTX ISA's instruction with its operands named; the fragment
// layouts below are the ISA's ("Matrix Fragments for mma.m16n8k16").
//
// In a warp, lane = 4 · group + thread_in_group (group 0..7, thread_in_group 0..3).
//
//   A (16×16 bf16, row major), four 32-bit registers of two bf16 each:
//     a0: row group,     columns 2·thread_in_group + {0, 1}
//     a1: row group + 8, the same columns
//     a2: row group,     columns 8 + 2·thread_in_group + {0, 1}
//     a3: row group + 8, the same columns as a2
//   B (16×8 bf16, "col": element (k, n)), two registers:
//     b0: k = 2·thread_in_group + {0, 1}, n = group
//     b1: k = 8 + 2·thread_in_group + {0, 1}, n = group
//   C, D (16×8 fp32), four floats:
//     c0, c1: row group,     columns 2·thread_in_group + {0, 1}
//     c2, c3: row group + 8, the same columns
//
// ldmatrix loads four 8×8 bf16 matrices from shared memory: lanes 8i..8i+7
// give the addresses of matrix i's eight rows (16 bytes each), and every lane
// receives, in register i, matrix i's row `group`, columns
// 2·thread_in_group + {0, 1} — exactly an A or B register. With .trans it
// receives the transposed element pair (rows 2·thread_in_group + {0, 1},
// column group), which turns a row-major (k, n) tile into a B register.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace servelab::cuda {

// D = A · B + C for one 16×8×16 tile: bf16 inputs, fp32 accumulation.
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The shared-memory address ldmatrix and cp.async take (a 32-bit offset in
// the shared window, not a generic pointer).
__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
    return uint32_t(__cvta_generic_to_shared(pointer));
}

// Four 8×8 matrices; `row` is this lane's row address (see above).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// The same, each matrix transposed on the way.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// An asynchronous 16-byte copy global → shared that bypasses the registers
// (and L1: .cg). With `present` false it reads nothing and writes 16 zero
// bytes (the source size 0 of the ISA's zero-fill form); `source` must then
// still be some valid address.
__device__ __forceinline__ void cp_async_16_bytes(void* destination, const void* source,
                                                  bool present) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(shared_address(destination)), "l"(source), "r"(present ? 16 : 0)
                 : "memory");
}

// Closes the group of cp.async copies this thread issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` of this thread's committed groups are still
// in flight (the newest ones). Other threads' copies need a barrier after it.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Two floats as the bf16 pair of one A register (the lower column in the low half).
__device__ __forceinline__ uint32_t pack_bf16x2(float low, float high) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<const uint32_t*>(&pair);
}

}  // namespace servelab::cuda
