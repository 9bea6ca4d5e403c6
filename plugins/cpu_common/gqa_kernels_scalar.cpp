// gqa.naive.scalar: the row pipeline on plain C++ loops. Baseline ISA; runs on every CPU of the
// plugin's architecture.
#include <math.h>
#include <stdint.h>

#include "gqa_convert.h"
#include "gqa_naive.h"
#include "gqa_pipeline.h"
#include "gqa_quant.h"

namespace attnrt::cpu {
namespace {

struct ScalarOps {
  static float Dot(const float* q, const GqaCacheRow& k, int64_t n) {
    float sum = 0.0f;
    auto step = [&](int64_t i, float x) { sum += q[i] * x; };
    ForEachCacheElement(k, 0, n, step);
    return sum;
  }
  static void Axpy(float alpha, const GqaCacheRow& v, float* y, int64_t n) {
    auto step = [&](int64_t i, float x) { y[i] += alpha * x; };
    ForEachCacheElement(v, 0, n, step);
  }
  static void Widen(const void* x, GqaFloatType type, float* y, int64_t n) {
    WidenRow(x, type, y, n);
  }
  static void AddWidened(const void* x, GqaFloatType type, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += LoadElement(x, type, i);
  }
  static void Narrow(const float* x, GqaFloatType type, void* y, int64_t n) {
    NarrowRow(x, type, y, n);
  }
  static void Scale(float alpha, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] *= alpha;
  }
  static float Max(const float* x, int64_t n) {
    float m = x[0];
    for (int64_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
    return m;
  }
  static float ExpSum(float* x, int64_t n, float m) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = expf(x[i] - m);
      sum += x[i];
    }
    return sum;
  }
};

}  // namespace

void GqaAttendRowsScalar(const GqaRun& run, float* scratch, int64_t unit_begin, int64_t unit_end) {
  AttendRows<ScalarOps>(run, scratch, unit_begin, unit_end);
}

void GqaAttendRowsPagedScalar(const GqaRun& run, float* scratch, int64_t unit_begin,
                              int64_t unit_end) {
  AttendRows<ScalarOps, true>(run, scratch, unit_begin, unit_end);
}

}  // namespace attnrt::cpu
