// test_main.cpp — main() of every GoogleTest binary of servelab (the unit
// tests and each lab's labNN_tests).
//
// Part of the test harness (all labs). The tests run with one OpenMP thread
// unless OMP_NUM_THREADS says otherwise, so that `build/release/labNN_tests`
// alone behaves as ctest and the grader run it: results never depend on the
// thread count (a test about threads sets its own count), and OpenMP threads
// that spin at barriers turn a sub-second run into minutes on a machine whose
// other core is busy (0.18 s became 55-112 s for Lab 5's tests).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>

int main(int argc, char** argv) {
    if (std::getenv("OMP_NUM_THREADS") == nullptr) omp_set_num_threads(1);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
