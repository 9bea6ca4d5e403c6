// gqa.flash.scalar: the block operations on plain C++ loops, K/V elements of every cache type
// dequantized on the fly. Baseline ISA; runs on every CPU of the plugin's architecture.
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "gqa_flash.h"
#include "gqa_quant.h"
#include "gqa_run.h"

namespace attnrt::cpu {
namespace {

GqaCacheRow Row(const GqaFlashKv& kv, int64_t j) {
  GqaCacheRow row;
  row.data = static_cast<const unsigned char*>(kv.data) + static_cast<size_t>(j) * kv.row_bytes;
  row.type = kv.type;
  row.scale = kv.scale;
  row.per_channel = kv.per_channel;
  return row;
}

// Each K/V element is decoded where it is used (ForEachCacheElement, as the naive scalar kernel
// reads the cache), so the sums are the naive kernel's, term for term.
void Scores(const float* q, int64_t rows, const GqaFlashKv& k, int64_t keys, int64_t h, float scale,
            float* scores, int64_t ld, const void* /*prefetch*/, size_t /*prefetch_bytes*/) {
  for (int64_t j = 0; j < keys; ++j) {
    const GqaCacheRow kj = Row(k, j);
    for (int64_t i = 0; i < rows; ++i) {
      const float* qi = q + i * h;
      float sum = 0.0f;
      auto step = [&](int64_t d, float x) { sum += qi[d] * x; };
      ForEachCacheElement(kj, 0, h, step);
      scores[i * ld + j] = scale * sum;
    }
  }
}

void Accumulate(const float* p, int64_t rows, int64_t ld, const GqaFlashKv& v, int64_t keys,
                int64_t h, float* acc, const void* /*prefetch*/, size_t /*prefetch_bytes*/) {
  for (int64_t j = 0; j < keys; ++j) {
    const GqaCacheRow vj = Row(v, j);
    for (int64_t i = 0; i < rows; ++i) {
      // A weight of 0 still multiplies: 0 * inf is NaN, as in every kernel (gqa-semantics.md).
      const float pj = p[i * ld + j];
      float* out = acc + i * h;
      auto step = [&](int64_t d, float x) { out[d] += pj * x; };
      ForEachCacheElement(vj, 0, h, step);
    }
  }
}

void Dequantize(const GqaFlashKv& kv, int64_t keys, int64_t h, float* out) {
  for (int64_t j = 0; j < keys; ++j) {
    float* row = out + j * h;
    auto step = [&](int64_t d, float x) { row[d] = x; };
    ForEachCacheElement(Row(kv, j), 0, h, step);
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

const GqaFlashOps kGqaFlashOpsScalar = {&Scores, &Accumulate, &Dequantize, &Max,    &ExpSum,
                                        &Scale,  1,           nullptr,     nullptr, nullptr};

}  // namespace attnrt::cpu
