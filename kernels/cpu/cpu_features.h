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

// Single CPUID bits, not capped by SERVELAB_SIMD_LEVEL, for the kernels that
// check one extension themselves. Read from CPUID directly: clang's
// __builtin_cpu_supports knows neither name (and the ThreadSanitizer build
// uses clang). False off x86.
bool cpuid_has_f16c();      // half-float conversions (CPUID 1, ECX bit 29)
bool cpuid_has_avx_vnni();  // VEX-coded int8 dot products (CPUID 7.1, EAX bit 4)

}  // namespace servelab
