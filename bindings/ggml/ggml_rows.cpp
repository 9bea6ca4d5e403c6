// Output rows computed as ggml defines them (see ggml_rows.h).
#include "ggml_rows.h"

#include "convert.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace attnrt_ggml {
namespace {

float Element(ggml_type type, const char* p) {
  switch (type) {
    case GGML_TYPE_F16: {
      ggml_fp16_t h;
      std::memcpy(&h, p, sizeof h);
      return ggml_fp16_to_fp32(h);
    }
    case GGML_TYPE_BF16: {
      ggml_bf16_t h;
      std::memcpy(&h, p, sizeof h);
      return ggml_bf16_to_fp32(h);
    }
    default: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return f;
    }
  }
}

// q as ggml's CPU backend takes it: rounded to the cache's type, or for a block-quantized K to its
// vec_dot_type, Q8_0 (quantized and dequantized again with ggml's own functions).
void RoundToCache(ggml_type type, float* q, int64_t n) {
  if (ggml_is_quantized(type)) {
    const ggml_type_traits* q8 = ggml_get_type_traits(GGML_TYPE_Q8_0);
    std::vector<char> blocks(ggml_row_size(GGML_TYPE_Q8_0, n));
    q8->from_float_ref(q, blocks.data(), n);
    q8->to_float(blocks.data(), q, n);
    return;
  }
  for (int64_t d = 0; d < n; ++d) {
    if (type == GGML_TYPE_F16) q[d] = ggml_fp16_to_fp32(ggml_fp32_to_fp16(q[d]));
    if (type == GGML_TYPE_BF16) q[d] = ggml_bf16_to_fp32(ggml_fp32_to_bf16(q[d]));
  }
}

// The n elements of a K or V row (elements nb0 bytes apart; a block-quantized row is contiguous)
// as float32, dequantized by ggml's own to_float for block types.
void RowAsFloat(ggml_type type, const char* p, size_t nb0, int64_t n, float* out) {
  if (ggml_is_quantized(type)) {
    ggml_get_type_traits(type)->to_float(p, out, n);
    return;
  }
  for (int64_t d = 0; d < n; ++d) out[d] = Element(type, p + d * nb0);
}

}  // namespace

// Row i of head h of stream b, as ggml computes it, into out (head_size floats).
static void ComputeRowAsGgml(const ggml_tensor* node, int64_t b, int64_t i, int64_t h, float* out,
                             std::vector<float>* scratch) {
  const ggml_tensor* q = node->src[0];
  const ggml_tensor* k = node->src[1];
  const ggml_tensor* v = node->src[2];
  const ggml_tensor* mask = node->src[3];
  const ggml_tensor* sinks = node->src[4];
  const int64_t d_k = k->ne[0], d_v = v->ne[0], total = k->ne[1];
  float scale = OpParam(node, 0);
  const float max_bias = OpParam(node, 1);
  const float softcap = OpParam(node, 2);
  if (softcap != 0.0f) scale /= softcap;
  const float slope = AlibiSlope(max_bias, q->ne[2], h);
  const int64_t kh = h / (q->ne[2] / k->ne[2]);
  const int64_t vh = h / (q->ne[2] / v->ne[2]);

  scratch->resize(static_cast<size_t>(2 * d_k + 2 * d_v));
  float* qr = scratch->data();
  float* acc = qr + d_k;
  float* kr = acc + d_v;  // the K row and the V row of a key as float32
  float* vr = kr + d_k;
  const char* qrow = static_cast<const char*>(q->data) + i * q->nb[1] + h * q->nb[2] + b * q->nb[3];
  for (int64_t d = 0; d < d_k; ++d) qr[d] = Element(GGML_TYPE_F32, qrow + d * q->nb[0]);
  RoundToCache(k->type, qr, d_k);
  for (int64_t d = 0; d < d_v; ++d) acc[d] = 0.0f;
  const char* mrow = mask == nullptr
                         ? nullptr
                         : static_cast<const char*>(mask->data) + i * mask->nb[1] +
                               (h % mask->ne[2]) * mask->nb[2] + (b % mask->ne[3]) * mask->nb[3];
  float m = -std::numeric_limits<float>::infinity(), sum = 0.0f;
  // ggml's online softmax: a new maximum rescales what was summed; `vrow` null for the sink.
  auto add = [&](float score, const char* vrow) {
    float ms = 1.0f, vs = 1.0f;
    if (score > m) {
      ms = std::exp(m - score);
      m = score;
      for (int64_t d = 0; d < d_v; ++d) acc[d] *= ms;
    } else {
      vs = std::exp(score - m);
    }
    if (vrow != nullptr) {
      RowAsFloat(v->type, vrow, v->nb[0], d_v, vr);
      for (int64_t d = 0; d < d_v; ++d) acc[d] += vr[d] * vs;
    }
    sum = sum * ms + vs;
  };
  for (int64_t j = 0; j < total; ++j) {
    const float mv =
        mrow != nullptr ? slope * Element(GGML_TYPE_F16, mrow + j * mask->nb[0]) : 0.0f;
    if (mv == -std::numeric_limits<float>::infinity()) continue;  // never read
    const char* krow =
        static_cast<const char*>(k->data) + j * k->nb[1] + kh * k->nb[2] + b * k->nb[3];
    RowAsFloat(k->type, krow, k->nb[0], d_k, kr);
    double dot = 0.0;
    for (int64_t d = 0; d < d_k; ++d) dot += double{qr[d]} * kr[d];
    float score = static_cast<float>(dot) * scale;
    if (softcap != 0.0f) score = softcap * std::tanh(score);
    add(score + mv,
        static_cast<const char*>(v->data) + j * v->nb[1] + vh * v->nb[2] + b * v->nb[3]);
  }
  if (sinks != nullptr)
    add(Element(GGML_TYPE_F32, static_cast<const char*>(sinks->data) + h * sinks->nb[0]), nullptr);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t d = 0; d < d_v; ++d) out[d] = acc[d] * inv;
}

uint64_t RedoRowsAsGgml(const ggml_tensor* node, int64_t b, int64_t r0, int64_t rows, char* dst,
                        const uint8_t* redo) {
  const ggml_tensor* sinks = node->src[4];
  const int64_t head_size = node->ne[0], num_heads = node->ne[1];
  std::vector<float> row(static_cast<size_t>(head_size)), scratch;
  uint64_t redone = 0;
  for (int64_t h = 0; h < num_heads; ++h) {
    bool minus_inf_sink = false;
    if (sinks != nullptr) {
      minus_inf_sink =
          Element(GGML_TYPE_F32, static_cast<const char*>(sinks->data) + h * sinks->nb[0]) ==
          -std::numeric_limits<float>::infinity();
    }
    for (int64_t i = 0; i < rows; ++i) {
      char* at = dst + static_cast<size_t>((i * num_heads + h) * head_size) * sizeof(float);
      std::memcpy(row.data(), at, row.size() * sizeof(float));
      bool zero = true, finite = true;
      for (int64_t d = 0; d < head_size && finite; ++d) {
        finite = std::isfinite(row[static_cast<size_t>(d)]);
        zero = zero && row[static_cast<size_t>(d)] == 0.0f;
      }
      if (finite && !(zero && minus_inf_sink) && redo[i] == 0) continue;
      ComputeRowAsGgml(node, b, r0 + i, h, row.data(), &scratch);
      std::memcpy(at, row.data(), row.size() * sizeof(float));
      ++redone;
    }
  }
  return redone;
}

}  // namespace attnrt_ggml
