// test_util.h — helpers shared by the unit tests.
//
// Random inputs are drawn fresh each run (seeded from std::random_device)
// so that tests are not tuned to one lucky draw; the seed is printed with
// every failure, and SERVELAB_TEST_SEED=N reproduces a run.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "reference/common/error.h"

#ifndef SERVELAB_SOURCE_DIR
#define SERVELAB_SOURCE_DIR "."
#endif

namespace servelab::test {

inline uint64_t test_seed() {
    if (const char* fixed = std::getenv("SERVELAB_TEST_SEED"))
        return std::strtoull(fixed, nullptr, 10);
    static const uint64_t seed = std::random_device{}();
    return seed;
}

// A per-test RNG; the seed shows up in any failure message of the test.
class RandomSource {
  public:
    explicit RandomSource(uint64_t salt = 0) : seed_(test_seed() + salt), rng_(seed_) {}
    uint64_t seed() const { return seed_; }
    std::string trace() const { return "SERVELAB_TEST_SEED=" + std::to_string(test_seed()); }

    std::vector<float> normal(size_t n, float stddev = 1.0f) {
        std::normal_distribution<float> dist(0.0f, stddev);
        std::vector<float> values(n);
        for (float& v : values) v = dist(rng_);
        return values;
    }
    std::vector<float> uniform(size_t n, float lo, float hi) {
        std::uniform_real_distribution<float> dist(lo, hi);
        std::vector<float> values(n);
        for (float& v : values) v = dist(rng_);
        return values;
    }
    int64_t integer(int64_t lo, int64_t hi) {  // inclusive
        return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
    }
    std::mt19937_64& engine() { return rng_; }

  private:
    uint64_t seed_;
    std::mt19937_64 rng_;
};

inline std::string source_path(const std::string& relative) {
    return std::string(SERVELAB_SOURCE_DIR) + "/" + relative;
}

inline const char* kSmolLm2Path = "data/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Runs `body`, which must throw servelab::Error, and returns the message
// (or records a failure and returns "" when nothing was thrown).
template <typename Body>
std::string error_of(Body body) {
    try {
        body();
    } catch (const Error& error) {
        return error.what();
    }
    ADD_FAILURE() << "expected a servelab::Error";
    return "";
}

// Largest |a - b| / max(|b|) over two equal-length arrays.
inline double max_relative_error(const std::vector<float>& a, const std::vector<float>& b) {
    double max_diff = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        max_diff = std::max(max_diff, double(std::abs(a[i] - b[i])));
        max_ref = std::max(max_ref, double(std::abs(b[i])));
    }
    return max_ref > 0 ? max_diff / max_ref : max_diff;
}

}  // namespace servelab::test
