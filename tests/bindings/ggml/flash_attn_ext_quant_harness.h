// The node builder and float64 reference of flash_attn_ext_quant_test.cpp: FLASH_ATTN_EXT nodes
// over ggml's Q8_0 and Q4_0 K/V caches (quantized by ggml_quantize_chunk) in every layout the
// tests need, the reference of ggml's definition of the op on the dequantized K/V, and the runs on
// a backend or through ggml's scheduler. Included by that file only.
#ifndef ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_QUANT_HARNESS_H_
#define ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_QUANT_HARNESS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flash_attn_ext_harness.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace fa_quant {

using fa_harness::kInf;
using fa_harness::kNaN;
using fa_harness::Shared;

enum class MaskKind { kNone, kUniform, kCausal, kScattered, kFn };
enum class VSource { kOwn, kSameAsK, kOtherHalfOfK };

struct QSpec {
  int64_t head_size = 64, rows = 5, heads = 4, kv_heads = 2, total = 40, streams = 1;
  ggml_type k_type = GGML_TYPE_Q8_0, v_type = GGML_TYPE_Q8_0;
  bool head_major = false;  // [D, T, Hkv] rows of a kv head contiguous (BNSH), else token-major
  VSource v_source = VSource::kOwn;
  size_t head_pad = 0;   // bytes after each K/V row (the head stride is the row plus this)
  size_t token_pad = 0;  // extra bytes in the token stride (token-major) / head stride (head-major)
  size_t offset = 0;     // bytes before the views in their caches
  int64_t window = 0;    // cells of the cache before the view (the view reads cells window..)
  size_t stream_pad = 0;
  MaskKind mask = MaskKind::kUniform;
  int64_t mask_heads = 1, mask_streams = 1;
  std::function<float(int64_t, int64_t, int64_t, int64_t)> mask_fn;  // (j, i, h, b)
  bool sinks = false;
  std::vector<float> sink_values;  // empty: uniform in [-4, 4]
  float scale = 0;                 // 0: 1 / sqrt(D)
  float max_bias = 0, softcap = 0;
  // ggml_flash_attn_ext_set_n_kv_max: a sparse mask's bound on the visible keys of a row (0: none).
  int32_t n_kv_max = 0;
  // Edits the quantized bytes of a K (is_v false) or V row (cell j, kv head g, stream b).
  std::function<void(bool, int64_t, int64_t, int64_t, uint8_t*, size_t)> edit_row;
};

struct QNode {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_tensor *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr, *sinks = nullptr,
              *out = nullptr;
  ggml_tensor *k_base = nullptr, *v_base = nullptr;
  QNode() = default;
  QNode(const QNode&) = delete;
  QNode& operator=(const QNode&) = delete;
  ~QNode() {
    if (buffer != nullptr) ggml_backend_buffer_free(buffer);
    if (ctx != nullptr) ggml_free(ctx);
  }
};

inline float MaskValue(const QSpec& s, int64_t j, int64_t i, int64_t h, int64_t b, float uniform) {
  switch (s.mask) {
    case MaskKind::kCausal:
      return j <= s.total - s.rows + i ? 0.0f : -kInf;
    case MaskKind::kScattered:
      return fa_harness::Scattered(j, i, h, b);
    case MaskKind::kFn:
      return s.mask_fn(j, i, h, b);
    default:
      return uniform;
  }
}

// A view [D, T, Hkv, B] of a block-quantized cache of `type`, byte strides as the spec says.
inline ggml_tensor* CacheView(ggml_context* ctx, const QSpec& s, ggml_type type, ggml_tensor** base,
                              size_t extra_offset) {
  const size_t row = ggml_row_size(type, s.head_size);
  const size_t row_span = s.v_source == VSource::kOtherHalfOfK ? 2 * row : row;
  const int64_t cells = s.window + s.total + 1;
  size_t nb1, nb2, nb3;  // token, head, stream
  if (!s.head_major) {
    nb2 = row_span + s.head_pad;
    nb1 = nb2 * static_cast<size_t>(s.kv_heads) + s.token_pad;
    nb3 = nb1 * static_cast<size_t>(cells) + s.stream_pad;
  } else {
    nb1 = row_span + s.head_pad;
    nb2 = nb1 * static_cast<size_t>(cells) + s.token_pad;
    nb3 = nb2 * static_cast<size_t>(s.kv_heads) + s.stream_pad;
  }
  const size_t bytes = nb3 * static_cast<size_t>(s.streams) + s.offset + 64;
  if (*base == nullptr) {
    const size_t bb = ggml_type_size(type);
    *base = ggml_new_tensor_1d(ctx, type, static_cast<int64_t>((bytes + bb - 1) / bb) * 32);
  }
  const size_t first = nb1 * static_cast<size_t>(s.window);  // the token stride
  return ggml_view_4d(ctx, *base, s.head_size, s.total, s.kv_heads, s.streams, nb1, nb2, nb3,
                      s.offset + first + extra_offset);
}

inline uint8_t* RowAt(const ggml_tensor* t, int64_t j, int64_t g, int64_t b) {
  return static_cast<uint8_t*>(t->data) + j * t->nb[1] + g * t->nb[2] + b * t->nb[3];
}

inline void Build(const QSpec& s, uint64_t seed, QNode* n, bool allocate = true) {
  ggml_init_params params = {ggml_tensor_overhead() * 32 + ggml_graph_overhead(), nullptr, true};
  n->ctx = ggml_init(params);
  ggml_context* ctx = n->ctx;
  // q as llama.cpp's: a permute of [D, H, S, B].
  ggml_tensor* q_base =
      ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.head_size, s.heads, s.rows, s.streams);
  n->q = ggml_permute(ctx, q_base, 0, 2, 1, 3);
  n->k = CacheView(ctx, s, s.k_type, &n->k_base, 0);
  if (s.v_source == VSource::kSameAsK) {
    n->v = n->k;
  } else if (s.v_source == VSource::kOtherHalfOfK) {
    n->v = CacheView(ctx, s, s.k_type, &n->k_base, ggml_row_size(s.k_type, s.head_size));
  } else {
    n->v = CacheView(ctx, s, s.v_type, &n->v_base, 0);
  }
  ggml_tensor* mask = nullptr;
  if (s.mask != MaskKind::kNone) {
    mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, s.total, s.rows, s.mask_heads, s.mask_streams);
    n->mask = mask;
  }
  n->out = ggml_flash_attn_ext(ctx, n->q, n->k, n->v, mask,
                               s.scale != 0 ? s.scale : 1.0f / std::sqrt(float(s.head_size)),
                               s.max_bias, s.softcap);
  if (s.sinks) {
    n->sinks = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, s.heads);
    ggml_flash_attn_ext_add_sinks(n->out, n->sinks);
  }
  if (s.n_kv_max > 0) ggml_flash_attn_ext_set_n_kv_max(n->out, s.n_kv_max);
  ggml_prec_set_acc(n->out, GGML_PREC_F32);
  n->graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(n->graph, n->out);
  if (!allocate) return;
  n->buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::uniform_int_distribution<int> garbage(0, 0x5B);  // any two bytes: a finite float16
  for (ggml_tensor* base : {n->k_base, n->v_base}) {
    if (base == nullptr) continue;
    uint8_t* p = static_cast<uint8_t*>(base->data);
    for (size_t i = 0; i < ggml_nbytes(base); ++i) p[i] = static_cast<uint8_t>(garbage(rng));
  }
  fa_harness::ForEach(n->q, [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    const float x = 1.5f * normal(rng);
    std::memcpy(fa_harness::At(n->q, a, b, c, d), &x, 4);
  });
  std::vector<float> x(static_cast<size_t>(s.head_size));
  auto fill = [&](const ggml_tensor* t, bool is_v) {
    for (int64_t b = 0; b < s.streams; ++b)
      for (int64_t g = 0; g < s.kv_heads; ++g)
        for (int64_t j = 0; j < s.total; ++j) {
          for (float& e : x) e = normal(rng);
          uint8_t* row = RowAt(t, j, g, b);
          ggml_quantize_chunk(t->type, x.data(), row, 0, 1, s.head_size, nullptr);
          if (s.edit_row) s.edit_row(is_v, j, g, b, row, ggml_row_size(t->type, s.head_size));
        }
  };
  fill(n->k, false);
  if (n->v != n->k) fill(n->v, true);
  if (mask != nullptr) {
    fa_harness::ForEach(mask, [&](int64_t j, int64_t i, int64_t h, int64_t b) {
      const float m = MaskValue(s, j, i, h, b, uniform(rng));
      const ggml_fp16_t f = ggml_fp32_to_fp16(m);
      std::memcpy(fa_harness::At(mask, j, i, h, b), &f, 2);
    });
  }
  if (n->sinks != nullptr) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const float v =
          s.sink_values.empty() ? 4.0f * uniform(rng) : s.sink_values[static_cast<size_t>(h)];
      std::memcpy(fa_harness::At(n->sinks, h, 0, 0, 0), &v, 4);
    }
  }
}

struct Reference {
  std::vector<double> out;  // [B][S][H][D]
  std::vector<char> redo;   // per (b, i, h): the row is ggml's own (q through Q8_0)
  double v_max = 0;
  uint64_t redo_rows = 0;
};

// q through Q8_0 as ggml's CPU backend on x86 quantizes it (quantize_row_q8_0 in
// ggml-cpu/arch/x86/quants.c): id = 127 / max|x|, codes rounded half to even; the reference
// quantizer (quantize_row_q8_0_ref, which the backend's own ggml_rows.cpp uses) takes id = 1 / d
// and rounds half away from zero, which moves a code now and then.
inline void CpuQ8_0(const float* x, float* out, int64_t n) {
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.0f;
    for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = ggml_fp16_to_fp32(ggml_fp32_to_fp16(amax / 127.0f));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t j = 0; j < 32; ++j) out[b + j] = std::nearbyint(x[b + j] * id) * d;
  }
}

// float64, ggml's definition on the dequantized K/V. `q8_query`: q through Q8_0 as ggml's CPU
// backend rounds it, every row; else q in float32 except for rows whose hidden cells hold
// non-finite K/V values (attnrt leaves them non-finite, as it reads every key before the
// diagonal), which the backend computes again by ggml's algorithm with q through
// quantize_row_q8_0_ref.
inline Reference Compute(const QNode& n, bool q8_query) {
  const ggml_tensor *q = n.q, *k = n.k, *v = n.v, *m = n.mask;
  const int64_t D = q->ne[0], S = q->ne[1], H = q->ne[2], B = q->ne[3], T = k->ne[1];
  const int64_t G = k->ne[2], group = H / G;
  float scale, max_bias, softcap;
  std::memcpy(&scale, reinterpret_cast<const float*>(n.out->op_params) + 0, 4);
  std::memcpy(&max_bias, reinterpret_cast<const float*>(n.out->op_params) + 1, 4);
  std::memcpy(&softcap, reinterpret_cast<const float*>(n.out->op_params) + 2, 4);
  if (softcap != 0) scale /= softcap;
  const uint32_t n_head_log2 = 1u << static_cast<uint32_t>(std::floor(std::log2(H)));
  const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(n_head_log2));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(n_head_log2));
  std::vector<float> kf(static_cast<size_t>(B * G * T * D)), vf(kf.size());
  std::vector<char> k_bad(static_cast<size_t>(B * G * T)), v_bad(k_bad.size());
  const ggml_type_traits* kt = ggml_get_type_traits(k->type);
  const ggml_type_traits* vt = ggml_get_type_traits(v->type);
  Reference r;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < T; ++j) {
        const size_t at = static_cast<size_t>((b * G + g) * T + j);
        // F32 rows have no to_float (a V of its own type may be F32).
        if (kt->to_float != nullptr) {
          kt->to_float(RowAt(k, j, g, b), &kf[at * D], D);
        } else {
          std::memcpy(&kf[at * D], RowAt(k, j, g, b), static_cast<size_t>(D) * sizeof(float));
        }
        if (vt->to_float != nullptr) {
          vt->to_float(RowAt(v, j, g, b), &vf[at * D], D);
        } else {
          std::memcpy(&vf[at * D], RowAt(v, j, g, b), static_cast<size_t>(D) * sizeof(float));
        }
        for (int64_t d = 0; d < D; ++d) {
          if (!std::isfinite(kf[at * D + d])) k_bad[at] = 1;
          if (!std::isfinite(vf[at * D + d])) v_bad[at] = 1;
          if (std::isfinite(vf[at * D + d]))
            r.v_max = std::max(r.v_max, std::fabs(double{vf[at * D + d]}));
        }
      }
  r.out.assign(static_cast<size_t>(D * H * S * B), 0.0);
  r.redo.assign(static_cast<size_t>(B * S * H), 0);
  std::vector<float> q32(static_cast<size_t>(D)), q8(static_cast<size_t>(D));
  std::vector<char> blocks(ggml_row_size(GGML_TYPE_Q8_0, D));
  std::vector<double> acc(static_cast<size_t>(D));
  const ggml_type_traits* q8t = ggml_get_type_traits(GGML_TYPE_Q8_0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const uint32_t hu = static_cast<uint32_t>(h);
      const float slope =
          max_bias > 0.0f
              ? (hu < n_head_log2 ? std::pow(m0, static_cast<float>(hu + 1))
                                  : std::pow(m1, static_cast<float>(2 * (hu - n_head_log2) + 1)))
              : 1.0f;
      const int64_t g = h / group;
      for (int64_t i = 0; i < S; ++i) {
        bool redo = q8_query;
        for (int64_t j = 0; j < T && !redo; ++j) {
          const float mv =
              m != nullptr
                  ? slope * fa_harness::Load(GGML_TYPE_F16,
                                             fa_harness::At(m, j, i, h % m->ne[2], b % m->ne[3]))
                  : 0.0f;
          const size_t at = static_cast<size_t>((b * G + g) * T + j);
          if (mv == -kInf && (k_bad[at] || v_bad[at])) redo = true;
        }
        if (redo && !q8_query) ++r.redo_rows;
        r.redo[static_cast<size_t>((b * S + i) * H + h)] = redo ? 1 : 0;
        for (int64_t d = 0; d < D; ++d) {
          std::memcpy(&q32[static_cast<size_t>(d)], fa_harness::At(q, d, i, h, b), 4);
        }
        if (q8_query) {
          CpuQ8_0(q32.data(), q8.data(), D);
        } else {
          q8t->from_float_ref(q32.data(), blocks.data(), D);
          q8t->to_float(blocks.data(), q8.data(), D);
        }
        const std::vector<float>& qr = redo ? q8 : q32;
        double M = -std::numeric_limits<double>::infinity(), sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        auto add = [&](double sc, const float* vrow) {
          double ms = 1, vs = 1;
          if (sc > M) {
            ms = std::exp(M - sc);
            M = sc;
          } else {
            vs = std::exp(sc - M);
          }
          for (int64_t d = 0; d < D; ++d) {
            acc[static_cast<size_t>(d)] =
                acc[static_cast<size_t>(d)] * ms + (vrow != nullptr ? vrow[d] * vs : 0.0);
          }
          sum = sum * ms + vs;
        };
        for (int64_t j = 0; j < T; ++j) {
          const float mv =
              m != nullptr
                  ? slope * fa_harness::Load(GGML_TYPE_F16,
                                             fa_harness::At(m, j, i, h % m->ne[2], b % m->ne[3]))
                  : 0.0f;
          if (mv == -kInf) continue;
          const size_t row = static_cast<size_t>(((b * G + g) * T + j) * D);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double{qr[static_cast<size_t>(d)]} * kf[row + d];
          double sc = dot * scale;
          if (softcap != 0) sc = softcap * std::tanh(sc);
          add(sc + mv, &vf[row]);
        }
        if (n.sinks != nullptr) {
          float sink;
          std::memcpy(&sink, fa_harness::At(n.sinks, h, 0, 0, 0), 4);
          add(sink, nullptr);
        }
        for (int64_t d = 0; d < D; ++d) {
          r.out[static_cast<size_t>(((b * S + i) * H + h) * D + d)] =
              sum == 0 ? 0.0 : acc[static_cast<size_t>(d)] / sum;
        }
      }
    }
  }
  return r;
}

inline size_t Mismatches(const std::string& who, const std::vector<float>& got,
                         const std::vector<double>& want, double atol) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok =
        std::isnan(want[i]) ? std::isnan(got[i]) : std::fabs(double{got[i]} - want[i]) <= atol;
    if (!ok && bad++ < 4) {
      ADD_FAILURE() << who << " element " << i << ": " << got[i] << ", float64 reference "
                    << want[i] << " (tolerance " << atol << ")";
    }
  }
  return bad;
}

// Test-only: a constant added to every reference element (set to show that the checks can fail).
inline double ReferenceBias() {
  const char* v = std::getenv("ATTNRT_GGML_QUANT_TEST_BREAK");
  return v != nullptr ? std::atof(v) : 0.0;
}

inline ggml_status RunNode(ggml_backend_t backend, const QNode& n, std::vector<float>* out) {
  std::vector<float> poison(static_cast<size_t>(ggml_nelements(n.out)), kNaN);
  std::memcpy(n.out->data, poison.data(), ggml_nbytes(n.out));
  const ggml_status status = ggml_backend_graph_compute(backend, n.graph);
  out->resize(poison.size());
  std::memcpy(out->data(), n.out->data, ggml_nbytes(n.out));
  return status;
}

// The contract on one node: attnrt claims it and computes every element within float32
// accumulation of the reference (rows whose hidden cells hold non-finite K/V values: of the
// Q8_0-query reference, and computed again by ggml's algorithm, counted); ggml's CPU backend is
// held to the Q8_0-query reference.
inline void Check(const QSpec& s, uint64_t seed, const std::string& what, bool check_cpu = true,
                  bool count_rows = true) {
  SCOPED_TRACE(what + " (seed " + std::to_string(seed) + ")");
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  QNode n;
  Build(s, seed, &n);
  ASSERT_TRUE(ggml_backend_supports_op(be.attnrt, n.out)) << what;
  Reference want = Compute(n, false);
  const double atol = 1e-4 * std::max(want.v_max, 1e-3);
  const double brk = ReferenceBias();
  for (double& x : want.out) x += brk;
  std::vector<float> got;
  const uint64_t before = be.GgmlRows();
  ASSERT_EQ(RunNode(be.attnrt, n, &got), GGML_STATUS_SUCCESS);
  if (count_rows) {
    EXPECT_EQ(be.GgmlRows() - before, want.redo_rows) << "rows computed again by ggml's algorithm";
  }
  EXPECT_EQ(Mismatches("attnrt " + what, got, want.out, atol), 0u);
  if (check_cpu) {
    Reference cpu_want = Compute(n, true);
    ASSERT_EQ(RunNode(be.cpu, n, &got), GGML_STATUS_SUCCESS);
    EXPECT_EQ(Mismatches("ggml CPU " + what, got, cpu_want.out, 5 * atol), 0u)
        << "the reference is not ggml's op";
  }
}

// Which backend ggml's scheduler gives the node, attnrt first (as a host lists an ACCEL device).
inline ggml_backend_t Scheduled(const QSpec& s) {
  fa_harness::Backends& be = Shared();
  QNode n;  // allocated in the CPU backend's buffer, as a host's KV cache is
  Build(s, 1, &n);
  ggml_backend_t backends[2] = {be.attnrt, be.cpu};
  ggml_backend_sched_t sched = ggml_backend_sched_new(backends, nullptr, 2, 64, false, true);
  ggml_backend_t chosen = nullptr;
  if (ggml_backend_sched_alloc_graph(sched, n.graph)) {
    chosen = ggml_backend_sched_get_tensor_backend(sched, n.out);
  }
  ggml_backend_sched_free(sched);
  return chosen;
}

const ggml_type kTypes[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};

inline std::string Name(ggml_type t) { return ggml_type_name(t); }

}  // namespace fa_quant

#endif  // ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_QUANT_HARNESS_H_
