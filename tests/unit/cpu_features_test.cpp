// cpu_features_test.cpp — SERVELAB_SIMD_LEVEL caps the kernels' dispatch.
//
// CPU speed work. ctest runs the kernel tests three more times with the
// level capped at portable, avx2 and avx512 (CMakeLists.txt: simd_level_*),
// so every dispatch level this machine can run is checked against the plain
// kernels on fresh random inputs. This test makes sure the cap really
// applies: a cap that was ignored would run the best level three times and
// pass without checking the others.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_matmul_repacked.h"

namespace servelab {
namespace {

TEST(CpuFeatures, TheLevelCapApplies) {
    const char* cap = std::getenv("SERVELAB_SIMD_LEVEL");
    const std::string wanted = cap == nullptr ? "" : cap;
    if (wanted == "portable") {
        EXPECT_EQ(simd_level(), SimdLevel::kPortable) << "the portable cap was ignored";
        EXPECT_FALSE(cpu_runs_repacked());
    } else if (wanted == "avx2") {
        EXPECT_LE(int(simd_level()), int(SimdLevel::kAvx2)) << "the avx2 cap was ignored";
        EXPECT_FALSE(cpu_runs_repacked()) << "the repacked kernel needs AVX-512; the cap is avx2";
    } else {
        // No cap (or avx512): the best this CPU has.
        EXPECT_EQ(cpu_runs_repacked(), simd_level() == SimdLevel::kAvx512);
    }
}

}  // namespace
}  // namespace servelab
