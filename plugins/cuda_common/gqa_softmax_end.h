// The end of one output row of the CUDA GroupQueryAttention kernels: the non-finite rule of
// docs/gqa-semantics.md (non-finite values) in one function, compiled for the device by the
// kernels and for the host by tests/plugins/cuda/cuda_rules_test.cpp, which checks it without a
// GPU. No CUDA header: plain C++, __host__ __device__ under nvcc (ATTNRT_HOST_DEVICE).
#pragma once

#include <math.h>

#include "gqa_cuda_params.h"  // ATTNRT_HOST_DEVICE

namespace attnrt::cuda {

// exp: the fast intrinsic on the device (as the kernels' softmax), expf on the host.
ATTNRT_HOST_DEVICE float RowExp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return expf(x);
#endif
}

// How a row ends: every element constant (`fill`: a NaN row or a zero row), or value * factor.
struct RowEnd {
  bool constant;
  float fill;
  float factor;
};

// m: the largest visible score of the row (-inf when every one is -inf, or there is none); sum:
// the sum of exp(s - m) over them (exp(s) when m is -inf), NaN when a score is NaN or +inf;
// has_sink / sink: the row's sink logit (smooth softmax: 0). The rule: a NaN or +inf sink, or a
// NaN sum, makes a NaN row; otherwise m = -inf makes a zero row (the sink, if any, takes all the
// weight and brings no value); otherwise the output is value / (sum + exp(sink - m)), computed
// relative to max(m, sink).
ATTNRT_HOST_DEVICE RowEnd EndRow(float m, float sum, bool has_sink, float sink) {
  if ((has_sink && !(sink < INFINITY)) || sum != sum) return RowEnd{true, NAN, 0.0f};
  if (m == -INFINITY) return RowEnd{true, 0.0f, 0.0f};
  if (!has_sink) return RowEnd{false, 0.0f, 1.0f / sum};
  const float mf = m > sink ? m : sink;
  const float scale = RowExp(m - mf);
  return RowEnd{false, 0.0f, scale / (sum * scale + RowExp(sink - mf))};
}

// One output element of the row: `value` is its unnormalized sum relative to m.
ATTNRT_HOST_DEVICE float EndValue(const RowEnd& end, float value) {
  return end.constant ? end.fill : value * end.factor;
}

}  // namespace attnrt::cuda
