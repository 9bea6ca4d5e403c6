// The fuzzers' generator for tensor contents and shuffles: splitmix64, seeded from the fuzzer's
// bytes, so an input always decodes to the same call. Header-only: each fuzzer includes it once.
#pragma once

#include <cstdint>

namespace fuzz_rng {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Unit() { return static_cast<float>(Next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }

 private:
  uint64_t state_;
};

}  // namespace fuzz_rng
