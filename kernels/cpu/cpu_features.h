// cpu_features.h — which SIMD levels this CPU runs, asked once at run time.
//
// Part of the CPU kernels (all labs). The build targets baseline x86-64, so
// a binary runs on any 64-bit x86 CPU; the kernels that need more (AVX2,
// AVX-512) are compiled for it function by function and called only where
// these say the CPU has it. SERVELAB_SIMD_LEVEL=portable|avx2|avx512 in the
// environment caps the level (to test each path on one machine, and to
// measure what a level buys); unset, the best the CPU has is used.
#pragma once

namespace servelab {

enum class SimdLevel { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// The CPU's best level (AVX2 = AVX2 + FMA + F16C; AVX-512 = F, BW, DQ, VL
// and VNNI on top), capped by SERVELAB_SIMD_LEVEL. Read once per process.
SimdLevel simd_level();

}  // namespace servelab
