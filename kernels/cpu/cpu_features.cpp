// cpu_features.cpp — see cpu_features.h.
#include "kernels/cpu/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

namespace servelab {

bool cpuid_has_f16c() {
#if defined(__x86_64__) || defined(_M_X64)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & (1u << 29)) != 0;
#else
    return false;
#endif
}

bool cpuid_has_avx_vnni() {
#if defined(__x86_64__) || defined(_M_X64)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (eax & (1u << 4)) != 0;
#else
    return false;
#endif
}

namespace {

SimdLevel detected_level() {
#if defined(__x86_64__) || defined(_M_X64)
    const bool avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_has_f16c();
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    return avx512 ? SimdLevel::kAvx512 : avx2 ? SimdLevel::kAvx2 : SimdLevel::kPortable;
#else
    return SimdLevel::kPortable;
#endif
}

SimdLevel capped_level() {
    const SimdLevel best = detected_level();
    const char* cap = std::getenv("SERVELAB_SIMD_LEVEL");
    if (cap == nullptr || *cap == '\0') return best;
    SimdLevel wanted = best;
    if (std::strcmp(cap, "portable") == 0) {
        wanted = SimdLevel::kPortable;
    } else if (std::strcmp(cap, "avx2") == 0) {
        wanted = SimdLevel::kAvx2;
    } else if (std::strcmp(cap, "avx512") == 0) {
        wanted = SimdLevel::kAvx512;
    } else {
        std::fprintf(stderr,
                     "servelab: SERVELAB_SIMD_LEVEL=%s is not portable, avx2 or avx512; "
                     "using the CPU's best\n",
                     cap);
    }
    return int(wanted) < int(best) ? wanted : best;  // a cap, never more than the CPU has
}

}  // namespace

SimdLevel simd_level() {
    static const SimdLevel level = capped_level();
    return level;
}

}  // namespace servelab
