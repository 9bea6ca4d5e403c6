// gqa.flash.scalar: the block operations on plain C++ loops. Baseline x86-64; runs on every CPU.
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "gqa_flash.h"

namespace attnrt::cpu_x86 {
namespace {

void Scores(const float* q, int64_t rows, const float* k, int64_t keys, int64_t h, float scale,
            float* scores, int64_t ld, const float* /*prefetch*/, size_t /*prefetch_bytes*/) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* qi = q + i * h;
    for (int64_t j = 0; j < keys; ++j) {
      const float* kj = k + j * h;
      float sum = 0.0f;
      for (int64_t d = 0; d < h; ++d) sum += qi[d] * kj[d];
      scores[i * ld + j] = scale * sum;
    }
  }
}

void Accumulate(const float* p, int64_t rows, int64_t ld, const float* v, int64_t keys, int64_t h,
                float* acc, const float* /*prefetch*/, size_t /*prefetch_bytes*/) {
  for (int64_t i = 0; i < rows; ++i) {
    float* out = acc + i * h;
    for (int64_t j = 0; j < keys; ++j) {
      const float pj = p[i * ld + j];
      if (pj == 0.0f) continue;  // masked or underflowed: adds nothing
      const float* vj = v + j * h;
      for (int64_t d = 0; d < h; ++d) out[d] += pj * vj[d];
    }
  }
}

float Max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float ExpSum(float* x, int64_t n, float m) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = expf(x[i] - m);
    sum += x[i];
  }
  return sum;
}

void Scale(float alpha, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
}

}  // namespace

const GqaFlashOps kGqaFlashOpsScalar = {&Scores, &Accumulate, &Max, &ExpSum, &Scale};

}  // namespace attnrt::cpu_x86
