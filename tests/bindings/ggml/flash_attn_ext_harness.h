// FLASH_ATTN_EXT nodes of any layout ggml allows, built through ggml's public API, with a float64
// reference that follows ggml's definition of the op (ggml.h, ggml_flash_attn_ext; the CPU
// backend's ggml_compute_forward_flash_attn_ext_f16_one_chunk in ggml/src/ggml-cpu/ops.cpp): per
// stream b, head h and query row i, q rounded to the cache's type, the keys j whose (slope-scaled)
// mask entry is not -inf in order, s = scale * q.k_j (then c * tanh(s / c) for a softcap c), plus
// the mask, an online softmax with the sink as one more logit, an all-hidden row giving 0.
// Memory the node's views do not cover (row and cell padding, mask rows and columns past n_q and
// n_kv) holds NaN, and the output is poisoned before each run.
#ifndef ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_HARNESS_H_
#define ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_HARNESS_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace fa_harness {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline uint64_t Seed() {
  static const uint64_t seed = [] {
    const char* s = std::getenv("ATTNRT_TEST_SEED");
    const uint64_t v = s != nullptr ? std::strtoull(s, nullptr, 10) : std::random_device{}();
    std::printf("ATTNRT_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return seed;
}

struct Backends {
  ggml_backend_t cpu = nullptr;
  ggml_backend_t attnrt = nullptr;
  ggml_backend_reg_t reg = nullptr;
  Backends() {
    if (ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU) == nullptr) {
      ggml_backend_load_all_from_path(ATTNRT_GGML_LIBRARY_DIR);
    }
    reg = ggml_backend_load(ATTNRT_GGML_BACKEND_PATH);
    if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) return;
    cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
    attnrt = NewAttnrt();
  }
  ggml_backend_t NewAttnrt() const {
    return ggml_backend_dev_init(ggml_backend_reg_dev_get(reg, 0), nullptr);
  }
  // Output rows the backend computed again by ggml's own algorithm (attnrt_ggml_ggml_rows).
  uint64_t GgmlRows() const {
    auto fn = reinterpret_cast<uint64_t (*)()>(
        ggml_backend_reg_get_proc_address(reg, "attnrt_ggml_ggml_rows"));
    return fn != nullptr ? fn() : 0;
  }
  // attnrt calls that ran causal attention because the mask hid every key after the diagonal.
  uint64_t CausalCalls() const {
    auto fn = reinterpret_cast<uint64_t (*)()>(
        ggml_backend_reg_get_proc_address(reg, "attnrt_ggml_causal_calls"));
    return fn != nullptr ? fn() : 0;
  }
  void SetThreads(ggml_backend_t backend, int n) const {
    auto fn = reinterpret_cast<ggml_backend_set_n_threads_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
    ASSERT_NE(fn, nullptr);
    fn(backend, n);
  }
};

inline Backends& Shared() {
  static Backends* b = new Backends();
  return *b;
}

enum class Layout { kTokenMajor, kHeadMajor };  // llama.cpp's cache [D, Hkv, cells] or ggml's
enum class VSource { kOwn, kSameAsK, kOtherHalfOfK };  // V's memory

struct Spec {
  int64_t head_size = 64, rows = 5, heads = 4, kv_heads = 2, total = 40, streams = 1;
  ggml_type kv_type = GGML_TYPE_F16;
  Layout k_layout = Layout::kTokenMajor, v_layout = Layout::kTokenMajor;
  VSource v_source = VSource::kOwn;
  int64_t row_pad = 0;     // elements after each K/V head row
  int64_t cell_pad = 0;    // cache cells after the view's n_kv
  size_t kv_offset = 0;    // bytes before the K and V views in their caches
  size_t stream_skew = 0;  // bytes added to the K and V views' stream stride
  bool q_permuted = true;  // q [D, S, H, B] a permute of [D, H, S, B], as llama.cpp's
  int64_t q_row_pad = 0;
  size_t q_offset = 0;
  bool mask = true;
  int64_t mask_cols = 0, mask_rows = 0;  // 0: n_kv, n_q
  int64_t mask_heads = 1, mask_streams = 1;
  size_t mask_offset = 0;  // bytes before the mask, a contiguous view of a larger tensor
  // mask(j, i, h, b) for the cells the node reads; empty: uniform in [-1, 1].
  std::function<float(int64_t, int64_t, int64_t, int64_t)> mask_fn;
  bool sinks = false;
  std::vector<float> sink_values;  // empty: uniform in [-4, 4]
  float scale = 0;                 // 0: 1 / sqrt(D)
  float max_bias = 0, softcap = 0;
  // ggml_flash_attn_ext_set_n_kv_max: a sparse mask's bound on the visible keys of a row (0: none).
  int32_t n_kv_max = 0;
  // Edits K (is_v false) or V element (d, j, g, b) after they are filled; returns the new value.
  std::function<float(bool, int64_t, int64_t, int64_t, int64_t, float)> edit_kv;
  // The bound Check holds the output to; 0: Tolerance(kv_type).
  double tolerance = 0;
};

inline void Store(ggml_type type, char* p, float x) {
  if (type == GGML_TYPE_F32) {
    std::memcpy(p, &x, 4);
  } else if (type == GGML_TYPE_F16) {
    const ggml_fp16_t h = ggml_fp32_to_fp16(x);
    std::memcpy(p, &h, 2);
  } else {
    const ggml_bf16_t h = ggml_fp32_to_bf16(x);
    std::memcpy(p, &h, 2);
  }
}

inline float Load(ggml_type type, const char* p) {
  if (type == GGML_TYPE_F32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  if (type == GGML_TYPE_F16) {
    ggml_fp16_t h;
    std::memcpy(&h, p, 2);
    return ggml_fp16_to_fp32(h);
  }
  ggml_bf16_t h;
  std::memcpy(&h, p, 2);
  return ggml_bf16_to_fp32(h);
}

inline float Round(ggml_type type, float x) {
  char b[4];
  Store(type, b, x);
  return Load(type, b);
}

inline char* At(const ggml_tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] +
         i3 * t->nb[3];
}

inline void FillNaN(ggml_tensor* t) {
  const int64_t n =
      static_cast<int64_t>(ggml_nbytes(t)) / static_cast<int64_t>(ggml_type_size(t->type));
  for (int64_t i = 0; i < n; ++i) {
    Store(t->type, static_cast<char*>(t->data) + i * static_cast<int64_t>(ggml_type_size(t->type)),
          kNaN);
  }
}

template <typename F>
void ForEach(const ggml_tensor* t, F f) {
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) f(i0, i1, i2, i3);
}

// A mask of llama.cpp's kind: row i sees cells j <= past + i, past = n_kv - n_q.
inline std::function<float(int64_t, int64_t, int64_t, int64_t)> Causal(int64_t rows,
                                                                       int64_t total) {
  return
      [=](int64_t j, int64_t i, int64_t, int64_t) { return j <= total - rows + i ? 0.0f : -kInf; };
}

// llama.cpp's ALiBi mask: -(distance) / per_key up to the diagonal (past = n_kv - n_q), -inf after.
inline std::function<float(int64_t, int64_t, int64_t, int64_t)> Distance(int64_t rows,
                                                                         int64_t total,
                                                                         float per_key) {
  return [=](int64_t j, int64_t i, int64_t, int64_t) {
    const int64_t pos = total - rows + i;
    return j <= pos ? -static_cast<float>(pos - j) / per_key : -kInf;
  };
}

// Finite values with -inf holes that differ by row, head and stream (no causal structure).
inline float Scattered(int64_t j, int64_t i, int64_t h, int64_t b) {
  const uint64_t x = static_cast<uint64_t>((j * 131 + i * 71 + h * 29 + b * 17) % 97);
  return x % 5 == 0 ? -kInf : static_cast<float>(x % 13) / 6.0f - 1.0f;
}

// One built, allocated and filled node.
struct Node {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_tensor *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr, *sinks = nullptr,
              *out = nullptr;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  Node() = default;
  ~Node() {
    if (buffer != nullptr) ggml_backend_buffer_free(buffer);
    if (ctx != nullptr) ggml_free(ctx);
  }
};

inline ggml_tensor* CacheView(ggml_context* ctx, const Spec& s, Layout layout, int64_t width,
                              ggml_tensor** base, size_t offset) {
  const int64_t cells = s.total + s.cell_pad + (s.kv_offset > 0 ? 1 : 0);
  const int64_t streams = s.streams + (s.stream_skew > 0 ? 1 : 0);
  const bool token_major = layout == Layout::kTokenMajor;
  if (*base == nullptr) {
    *base = token_major ? ggml_new_tensor_4d(ctx, s.kv_type, width, s.kv_heads, cells, streams)
                        : ggml_new_tensor_4d(ctx, s.kv_type, width, cells, s.kv_heads, streams);
  }
  const size_t nb3 = (*base)->nb[3] + s.stream_skew;
  if (token_major) {
    ggml_tensor* view = ggml_view_4d(ctx, *base, s.head_size, s.kv_heads, s.total, s.streams,
                                     (*base)->nb[1], (*base)->nb[2], nb3, offset);
    return ggml_permute(ctx, view, 0, 2, 1, 3);
  }
  return ggml_view_4d(ctx, *base, s.head_size, s.total, s.kv_heads, s.streams, (*base)->nb[1],
                      (*base)->nb[2], nb3, offset);
}

inline void Build(const Spec& s, uint64_t seed, Node* n) {
  ggml_init_params params = {ggml_tensor_overhead() * 32 + ggml_graph_overhead(), nullptr, true};
  n->ctx = ggml_init(params);
  ggml_context* ctx = n->ctx;
  const int64_t es = static_cast<int64_t>(ggml_type_size(s.kv_type));
  ggml_tensor* q_base = s.q_permuted
                            ? ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.head_size + s.q_row_pad + 1,
                                                 s.heads, s.rows, s.streams)
                            : ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.head_size + s.q_row_pad + 1,
                                                 s.rows, s.heads, s.streams);
  ggml_tensor* qv = ggml_view_4d(ctx, q_base, s.head_size, q_base->ne[1], q_base->ne[2], s.streams,
                                 q_base->nb[1], q_base->nb[2], q_base->nb[3], s.q_offset);
  n->q = s.q_permuted ? ggml_permute(ctx, qv, 0, 2, 1, 3) : qv;
  ggml_tensor *k_base = nullptr, *v_base = nullptr;
  const int64_t width = s.head_size * (s.v_source == VSource::kOtherHalfOfK ? 2 : 1) + s.row_pad;
  n->k = CacheView(ctx, s, s.k_layout, width, &k_base, s.kv_offset);
  if (s.v_source == VSource::kSameAsK) {
    n->v = n->k;
  } else if (s.v_source == VSource::kOtherHalfOfK) {
    n->v = CacheView(ctx, s, s.k_layout, width, &k_base,
                     s.kv_offset + static_cast<size_t>(s.head_size * es));
  } else {
    n->v = CacheView(ctx, s, s.v_layout, width, &v_base, s.kv_offset);
  }
  ggml_tensor* mask_base = nullptr;
  if (s.mask) {
    const int64_t ne0 = s.mask_cols > 0 ? s.mask_cols : s.total;
    const int64_t ne1 = s.mask_rows > 0 ? s.mask_rows : s.rows;
    mask_base =
        ggml_new_tensor_1d(ctx, GGML_TYPE_F16, ne0 * ne1 * s.mask_heads * s.mask_streams + 2);
    const size_t e = sizeof(ggml_fp16_t);
    n->mask = ggml_view_4d(ctx, mask_base, ne0, ne1, s.mask_heads, s.mask_streams, ne0 * e,
                           ne0 * ne1 * e, ne0 * ne1 * s.mask_heads * e, s.mask_offset);
  }
  n->out = ggml_flash_attn_ext(ctx, n->q, n->k, n->v, n->mask,
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
  n->buffer = ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  FillNaN(q_base);
  ForEach(n->q, [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    Store(GGML_TYPE_F32, At(n->q, a, b, c, d), 1.5f * normal(rng));
  });
  FillNaN(k_base);
  if (v_base != nullptr) FillNaN(v_base);
  ForEach(n->k, [&](int64_t d, int64_t j, int64_t g, int64_t b) {
    float x = normal(rng);
    if (s.edit_kv) x = s.edit_kv(false, d, j, g, b, x);
    Store(s.kv_type, At(n->k, d, j, g, b), x);
  });
  if (n->v != n->k) {
    ForEach(n->v, [&](int64_t d, int64_t j, int64_t g, int64_t b) {
      float x = normal(rng);
      if (s.edit_kv) x = s.edit_kv(true, d, j, g, b, x);
      Store(s.kv_type, At(n->v, d, j, g, b), x);
    });
  }
  if (n->mask != nullptr) {
    FillNaN(mask_base);
    ForEach(n->mask, [&](int64_t j, int64_t i, int64_t h, int64_t b) {
      float x = kNaN;  // cells past n_kv, rows past n_q: never read
      if (j < s.total && i < s.rows) x = s.mask_fn ? s.mask_fn(j, i, h, b) : uniform(rng);
      Store(GGML_TYPE_F16, At(n->mask, j, i, h, b), x);
    });
  }
  if (n->sinks != nullptr) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const float x =
          s.sink_values.empty() ? 4.0f * uniform(rng) : s.sink_values[static_cast<size_t>(h)];
      Store(GGML_TYPE_F32, At(n->sinks, h, 0, 0, 0), x);
    }
  }
}

// The node on `backend`, its output poisoned first: the status and the output [D, H, S, B].
inline ggml_status Run(ggml_backend_t backend, const Node& n, std::vector<float>* out) {
  std::vector<float> poison(static_cast<size_t>(ggml_nelements(n.out)), kNaN);
  std::memcpy(n.out->data, poison.data(), ggml_nbytes(n.out));
  const ggml_status status = ggml_backend_graph_compute(backend, n.graph);
  out->resize(poison.size());
  std::memcpy(out->data(), n.out->data, ggml_nbytes(n.out));
  return status;
}

// float64, ggml's definition of the node (see the top of this file), from the tensors' memory.
inline std::vector<double> Reference(const Node& n) {
  const ggml_tensor *q = n.q, *k = n.k, *v = n.v, *m = n.mask;
  const int64_t D = q->ne[0], S = q->ne[1], H = q->ne[2], B = q->ne[3], T = k->ne[1];
  const int64_t group = H / k->ne[2];
  float scale, max_bias, softcap;
  std::memcpy(&scale, reinterpret_cast<const float*>(n.out->op_params) + 0, 4);
  std::memcpy(&max_bias, reinterpret_cast<const float*>(n.out->op_params) + 1, 4);
  std::memcpy(&softcap, reinterpret_cast<const float*>(n.out->op_params) + 2, 4);
  if (softcap != 0) scale /= softcap;
  const uint32_t n_head_log2 = 1u << static_cast<uint32_t>(std::floor(std::log2(H)));
  const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(n_head_log2));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(n_head_log2));
  std::vector<double> out(static_cast<size_t>(D * H * S * B));
  std::vector<double> qr(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
  // K and V as floats [b][g][j][d], read once.
  const int64_t G = k->ne[2];
  std::vector<float> kf(static_cast<size_t>(B * G * T * D)), vf(kf.size());
  ForEach(k, [&](int64_t d, int64_t j, int64_t g, int64_t b) {
    kf[static_cast<size_t>(((b * G + g) * T + j) * D + d)] = Load(k->type, At(k, d, j, g, b));
    vf[static_cast<size_t>(((b * G + g) * T + j) * D + d)] = Load(v->type, At(v, d, j, g, b));
  });
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const uint32_t hu = static_cast<uint32_t>(h);
      const float slope =
          max_bias > 0.0f
              ? (hu < n_head_log2 ? std::pow(m0, static_cast<float>(hu + 1))
                                  : std::pow(m1, static_cast<float>(2 * (hu - n_head_log2) + 1)))
              : 1.0f;
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t d = 0; d < D; ++d) {
          qr[static_cast<size_t>(d)] = Round(k->type, Load(GGML_TYPE_F32, At(q, d, i, h, b)));
        }
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
            const double vd = vrow != nullptr ? vrow[d] : 0.0;
            acc[static_cast<size_t>(d)] = acc[static_cast<size_t>(d)] * ms + (vrow ? vd * vs : 0);
          }
          sum = sum * ms + vs;
        };
        for (int64_t j = 0; j < T; ++j) {
          const float mv =
              m != nullptr ? slope * Load(GGML_TYPE_F16, At(m, j, i, h % m->ne[2], b % m->ne[3]))
                           : 0.0f;
          if (mv == -kInf) continue;
          const size_t row = static_cast<size_t>(((b * G + h / group) * T + j) * D);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qr[static_cast<size_t>(d)] * kf[row + d];
          double sc = dot * scale;
          if (softcap != 0) sc = softcap * std::tanh(sc);
          add(sc + mv, &vf[row]);
        }
        if (n.sinks != nullptr) add(Load(GGML_TYPE_F32, At(n.sinks, h, 0, 0, 0)), nullptr);
        for (int64_t d = 0; d < D; ++d) {
          out[static_cast<size_t>(((b * S + i) * H + h) * D + d)] =
              sum == 0 ? 0.0 : acc[static_cast<size_t>(d)] / sum;
        }
      }
    }
  }
  return out;
}

// Elements outside atol + rtol |want| (NaN must match NaN).
inline size_t Mismatches(const std::string& who, const std::vector<float>& got,
                         const std::vector<double>& want, double tol) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = std::isnan(want[i])
                        ? std::isnan(got[i])
                        : std::fabs(got[i] - want[i]) <= tol + tol * std::fabs(want[i]);
    if (!ok && bad++ < 4) {
      ADD_FAILURE() << who << " element " << i << ": " << got[i] << ", float64 reference "
                    << want[i];
    }
  }
  return bad;
}

// Float rounding of the output for a cache type: the cache's rounding of q (and, for float16 and
// bfloat16, of the output) plus float32 arithmetic.
inline double Tolerance(ggml_type type) {
  return type == GGML_TYPE_F32 ? 2e-5 : type == GGML_TYPE_F16 ? 2e-3 : 1.6e-2;
}

struct Outcome {
  bool claimed = false;
  size_t attnrt_bad = 0, cpu_bad = 0;
};

// The contract on one node: where attnrt claims it, it computes it within float rounding of
// ggml's definition (GGML_STATUS_SUCCESS, every element); ggml's CPU backend, held to 5 times the
// bound, checks the reference.
inline Outcome Check(const Spec& s, uint64_t seed, const std::string& what,
                     ggml_backend_t attnrt = nullptr, bool check_cpu = true) {
  Backends& be = Shared();
  Outcome o;
  EXPECT_NE(be.attnrt, nullptr) << "ggml_backend_load(" << ATTNRT_GGML_BACKEND_PATH << ")";
  if (be.attnrt == nullptr) return o;
  if (attnrt == nullptr) attnrt = be.attnrt;
  Node n;
  Build(s, seed, &n);
  const std::vector<double> want = Reference(n);
  const double tol = s.tolerance > 0 ? s.tolerance : Tolerance(s.kv_type);
  std::vector<float> got;
  o.claimed = ggml_backend_supports_op(attnrt, n.out);
  if (o.claimed) {
    EXPECT_EQ(Run(attnrt, n, &got), GGML_STATUS_SUCCESS) << what;
    o.attnrt_bad = Mismatches("attnrt " + what, got, want, tol);
    EXPECT_EQ(o.attnrt_bad, 0u) << what << " (seed " << seed << ")";
  }
  if (check_cpu) {
    EXPECT_EQ(Run(be.cpu, n, &got), GGML_STATUS_SUCCESS) << what;
    o.cpu_bad = Mismatches("ggml CPU " + what, got, want, 5 * tol);
    EXPECT_EQ(o.cpu_bad, 0u) << what << ": the reference is not ggml's op";
  }
  return o;
}

}  // namespace fa_harness

#endif  // ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_HARNESS_H_
