// simd.h — what the x86 SIMD kernels share: the target attributes they are
// compiled with, and the small helpers every one of them needs.
//
// Part of the CPU kernels (all labs; Lab 8, the kernels lab, is given
// horizontal_sum and load_fp16_avx2 from here). The build targets baseline
// x86-64, so a binary runs on any 64-bit x86 CPU (Intel or AMD); a kernel
// that needs more is compiled for it function by function (SERVELAB_AVX2,
// SERVELAB_AVX_VNNI, SERVELAB_AVX512, SERVELAB_AVX512_VNNI) and called only after
// cpu_features.h said the CPU has it. Each helper carries the smallest target
// its instructions need: GCC and clang inline a function only into callers
// whose target includes the callee's, so one AVX2 helper serves the AVX2,
// AVX-VNNI and AVX-512 kernels alike, and none runs before the check.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define SERVELAB_X86 1
#endif

#ifdef SERVELAB_X86

#define SERVELAB_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SERVELAB_AVX_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define SERVELAB_AVX512 __attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl")))
#define SERVELAB_AVX512_VNNI \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

// Put around a section of AVX-512 code. GCC 12's AVX-512 intrinsics fill
// lanes they overwrite anyway with _mm512_undefined_*(), and -Wuninitialized
// reports those as read (a false positive, in the compiler's own headers);
// this quiets it for the section only.
#if defined(__GNUC__) && !defined(__clang__)
#define SERVELAB_BEGIN_AVX512_SECTION                                                    \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
        _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define SERVELAB_END_AVX512_SECTION _Pragma("GCC diagnostic pop")
#else
#define SERVELAB_BEGIN_AVX512_SECTION
#define SERVELAB_END_AVX512_SECTION
#endif

namespace servelab {

// The fp16 stored at p (a block's d or m, little-endian) as a float, in one
// F16C instruction; load_fp16 (dequantize.h) is the portable function call.
SERVELAB_AVX2 inline float load_fp16_avx2(const uint8_t* p) {
    return _cvtsh_ss(uint16_t(p[0] | (p[1] << 8)));
}

// The sum of v's 8 lanes: the upper half onto the lower, then pairs, then one.
SERVELAB_AVX2 inline float horizontal_sum(__m256 v) {
    const __m128 pairs = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 quads = _mm_add_ps(pairs, _mm_movehl_ps(pairs, pairs));
    return _mm_cvtss_f32(_mm_add_ss(quads, _mm_shuffle_ps(quads, quads, 1)));
}

}  // namespace servelab

#endif  // SERVELAB_X86
