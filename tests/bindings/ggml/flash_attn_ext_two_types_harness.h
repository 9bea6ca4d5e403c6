// The node builder, float64 reference and checks of the tests of the FLASH_ATTN_EXT nodes
// attnrt's ggml backend claims through its ABI 1.9 extension: K and V of two types and head
// sizes that are no multiple of 8 (flash_attn_ext_two_types_test.cpp,
// flash_attn_ext_two_types_values_test.cpp).
//
// The node builder here lays K and V out byte by byte (each cache its own type, head size,
// layout, padding and offset); memory the views do not cover holds 0xFF bytes (NaN in every float
// type, a NaN scale in every block type), so a read outside a view shows.
#ifndef ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_TWO_TYPES_HARNESS_H_
#define ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_TWO_TYPES_HARNESS_H_

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "flash_attn_ext_harness.h"
#include "flash_attn_ext_quant_harness.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace fa_two_types {

using fa_harness::kInf;
using fa_harness::kNaN;
using fa_harness::Seed;
using fa_harness::Shared;

enum class Mask { kNone, kUniform, kCausal, kScattered, kFn };

// Where one cache's view lies in its cache (byte strides made of these).
struct CacheLayout {
  // [D, T, Hkv]: a kv head's rows contiguous (ggml's own); else [D, Hkv, T] (llama.cpp's cache).
  bool head_major = false;
  size_t row_pad = 0;     // bytes after each row
  size_t outer_pad = 0;   // bytes added to the outer stride (token-major: token; else head)
  size_t offset = 0;      // bytes before the view
  size_t stream_pad = 0;  // bytes added to the stream stride
};

enum class VMemory {
  kOwn,         // V has a cache of its own
  kLeadingOfK,  // V is the leading Dv elements of K's rows (a ggml view of K's cache; K's type)
  kAliasOfK,    // V's cache is K's memory read as V's type (a tensor placed at K's address)
};

struct TSpec {
  int64_t d = 64, dv = 0, rows = 5, heads = 4, kv_heads = 2, total = 40, streams = 1;
  int64_t cell_pad = 0;  // cache cells after the view's n_kv
  ggml_type k_type = GGML_TYPE_F16, v_type = GGML_TYPE_Q4_0;
  CacheLayout k, v;
  VMemory v_memory = VMemory::kOwn;
  bool q_permuted = true;  // q [D, S, H, B] a permute of [D, H, S, B], as llama.cpp's
  Mask mask = Mask::kUniform;
  std::function<float(int64_t, int64_t, int64_t, int64_t)> mask_fn;  // (j, i, h, b)
  int64_t mask_heads = 1, mask_streams = 1, mask_extra_cols = 0, mask_extra_rows = 0;
  size_t mask_offset = 0;  // bytes before the mask (a contiguous view of a larger tensor)
  bool sinks = false;
  std::vector<float> sink_values;  // empty: uniform in [-4, 4]
  float scale = 0;                 // 0: 1 / sqrt(D)
  float max_bias = 0, softcap = 0;
  int32_t n_kv_max = 0;
  // K/V rows (cell j, kv head g, stream b) no query row of the stream sees hold poison_value.
  bool poison_hidden = false;
  // K (is_v false) or V rows set to NaN whatever the mask says.
  std::function<bool(bool, int64_t, int64_t, int64_t)> poison;
  float poison_value = kNaN;  // what poisoned rows hold (block types: their scales)
  // Every tensor that owns memory (q, the caches, the mask, the sinks, the output) ends where an
  // inaccessible page begins, each cache exactly where its view's last row ends: a read or write
  // past any of them faults.
  bool guard = false;
  float v_magnitude = 1.0f;  // V's elements: this times a standard normal
  int64_t Dv() const { return dv > 0 ? dv : d; }
};

struct TNode {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_tensor *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr, *sinks = nullptr,
              *out = nullptr;
  ggml_tensor *k_base = nullptr, *v_base = nullptr;
  // Guarded tensors: their buffers and mappings (TSpec::guard).
  std::vector<ggml_backend_buffer_t> guarded;
  std::vector<std::pair<void*, size_t>> maps;
  TNode() = default;
  TNode(const TNode&) = delete;
  TNode& operator=(const TNode&) = delete;
  ~TNode() {
    if (buffer != nullptr) ggml_backend_buffer_free(buffer);
    for (ggml_backend_buffer_t b : guarded) ggml_backend_buffer_free(b);
    for (const auto& [p, n] : maps) munmap(p, n);
    if (ctx != nullptr) ggml_free(ctx);
  }
};

// Places `t` so that its last byte is followed by an inaccessible page.
inline void PlaceBeforeGuardPage(TNode* n, ggml_tensor* t) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = ggml_nbytes(t);
  const size_t pages = (bytes + page - 1) / page + 1;
  void* map =
      mmap(nullptr, (pages + 1) * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  n->maps.emplace_back(map, (pages + 1) * page);
  char* guard = static_cast<char*>(map) + pages * page;
  ASSERT_EQ(mprotect(guard, page, PROT_NONE), 0);
  ggml_backend_buffer_t buffer = ggml_backend_cpu_buffer_from_ptr(map, pages * page);
  ASSERT_NE(buffer, nullptr);
  n->guarded.push_back(buffer);
  ASSERT_EQ(ggml_backend_tensor_alloc(buffer, t, guard - bytes), GGML_STATUS_SUCCESS);
}

// Byte strides of a cache of `type` rows of `width` elements laid out as `l`; returns its bytes.
inline size_t CacheStrides(const TSpec& s, ggml_type type, int64_t width, const CacheLayout& l,
                           size_t* nb) {
  const size_t row = ggml_row_size(type, width);
  const size_t cells = static_cast<size_t>(s.total + s.cell_pad);
  const size_t heads = static_cast<size_t>(s.kv_heads);
  if (!l.head_major) {
    nb[2] = row + l.row_pad;
    nb[1] = nb[2] * heads + l.outer_pad;
    nb[3] = nb[1] * cells + l.stream_pad;
  } else {
    nb[1] = row + l.row_pad;
    nb[2] = nb[1] * cells + l.outer_pad;
    nb[3] = nb[2] * heads + l.stream_pad;
  }
  if (s.guard) {  // up to the end of the view's last row
    return l.offset + row + nb[1] * static_cast<size_t>(s.total - 1) + nb[2] * (heads - 1) +
           nb[3] * static_cast<size_t>(s.streams - 1);
  }
  return nb[3] * static_cast<size_t>(s.streams) + l.offset + 64;
}

inline ggml_tensor* NewBytes(ggml_context* ctx, ggml_type type, size_t bytes) {
  const size_t block = ggml_type_size(type);
  return ggml_new_tensor_1d(
      ctx, type, static_cast<int64_t>((bytes + block - 1) / block) * ggml_blck_size(type));
}

inline char* RowAt(const ggml_tensor* t, int64_t j, int64_t g, int64_t b) {
  return static_cast<char*>(t->data) + j * t->nb[1] + g * t->nb[2] + b * t->nb[3];
}

// A K/V row as float32: ggml's to_float for block types, element by element (nb0 apart) else.
inline void RowToFloat(const ggml_tensor* t, int64_t j, int64_t g, int64_t b, float* out) {
  const char* p = RowAt(t, j, g, b);
  if (ggml_is_quantized(t->type)) {
    ggml_get_type_traits(t->type)->to_float(p, out, t->ne[0]);
    return;
  }
  for (int64_t d = 0; d < t->ne[0]; ++d) out[d] = fa_harness::Load(t->type, p + d * t->nb[0]);
}

inline void WriteRow(const ggml_tensor* t, int64_t j, int64_t g, int64_t b, const float* x) {
  char* p = RowAt(t, j, g, b);
  if (ggml_is_quantized(t->type)) {
    ggml_quantize_chunk(t->type, x, p, 0, 1, t->ne[0], nullptr);
    return;
  }
  for (int64_t d = 0; d < t->ne[0]; ++d) fa_harness::Store(t->type, p + d * t->nb[0], x[d]);
}

// NaN in every element of a row (block types: every block's scale).
inline void PoisonRow(const ggml_tensor* t, int64_t j, int64_t g, int64_t b, float value) {
  char* p = RowAt(t, j, g, b);
  if (ggml_is_quantized(t->type)) {
    const ggml_fp16_t scale = ggml_fp32_to_fp16(value);
    const int64_t blocks = t->ne[0] / ggml_blck_size(t->type);
    for (int64_t i = 0; i < blocks; ++i) {
      std::memcpy(p + static_cast<size_t>(i) * ggml_type_size(t->type), &scale, 2);
    }
    return;
  }
  for (int64_t d = 0; d < t->ne[0]; ++d) fa_harness::Store(t->type, p + d * t->nb[0], value);
}

inline float Slope(float max_bias, int64_t heads, int64_t h) {
  if (max_bias <= 0.0f) return 1.0f;
  const uint32_t n_head_log2 = 1u << static_cast<uint32_t>(std::floor(std::log2(heads)));
  const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(n_head_log2));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(n_head_log2));
  const uint32_t hu = static_cast<uint32_t>(h);
  return hu < n_head_log2 ? std::pow(m0, static_cast<float>(hu + 1))
                          : std::pow(m1, static_cast<float>(2 * (hu - n_head_log2) + 1));
}

// slope(h) * mask(j, i, h, b) as ggml's CPU backend forms it (float32), 0 without a mask.
inline float MaskTerm(const TNode& n, int64_t j, int64_t i, int64_t h, int64_t b) {
  if (n.mask == nullptr) return 0.0f;
  float max_bias;
  std::memcpy(&max_bias, reinterpret_cast<const float*>(n.out->op_params) + 1, 4);
  const float m = fa_harness::Load(
      GGML_TYPE_F16, fa_harness::At(n.mask, j, i, h % n.mask->ne[2], b % n.mask->ne[3]));
  return Slope(max_bias, n.q->ne[2], h) * m;
}

inline void Build(const TSpec& s, uint64_t seed, TNode* n) {
  ggml_init_params params = {ggml_tensor_overhead() * 32 + ggml_graph_overhead(), nullptr, true};
  n->ctx = ggml_init(params);
  ggml_context* ctx = n->ctx;
  const int64_t dv = s.Dv();
  ggml_tensor* q_base =
      s.q_permuted ? ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.d + 1, s.heads, s.rows, s.streams)
                   : ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.d + 1, s.rows, s.heads, s.streams);
  ggml_tensor* qv = ggml_view_4d(ctx, q_base, s.d, q_base->ne[1], q_base->ne[2], s.streams,
                                 q_base->nb[1], q_base->nb[2], q_base->nb[3], 0);
  n->q = s.q_permuted ? ggml_permute(ctx, qv, 0, 2, 1, 3) : qv;

  size_t knb[4], vnb[4];
  const size_t k_bytes = CacheStrides(s, s.k_type, s.d, s.k, knb);
  n->k_base = NewBytes(ctx, s.k_type, k_bytes);
  n->k = ggml_view_4d(ctx, n->k_base, s.d, s.total, s.kv_heads, s.streams, knb[1], knb[2], knb[3],
                      s.k.offset);
  ggml_tensor* alias = nullptr;
  switch (s.v_memory) {
    case VMemory::kOwn: {
      const size_t v_bytes = CacheStrides(s, s.v_type, dv, s.v, vnb);
      n->v_base = NewBytes(ctx, s.v_type, v_bytes);
      n->v = ggml_view_4d(ctx, n->v_base, dv, s.total, s.kv_heads, s.streams, vnb[1], vnb[2],
                          vnb[3], s.v.offset);
      break;
    }
    case VMemory::kLeadingOfK:
      n->v = ggml_view_4d(ctx, n->k_base, dv, s.total, s.kv_heads, s.streams, knb[1], knb[2],
                          knb[3], s.k.offset);
      break;
    case VMemory::kAliasOfK: {
      const size_t v_bytes = CacheStrides(s, s.v_type, dv, s.v, vnb);
      EXPECT_LE(v_bytes, ggml_nbytes(n->k_base));
      alias = NewBytes(ctx, s.v_type, std::min(v_bytes, ggml_nbytes(n->k_base) - 64));
      n->v = ggml_view_4d(ctx, alias, dv, s.total, s.kv_heads, s.streams, vnb[1], vnb[2], vnb[3],
                          s.v.offset);
      break;
    }
  }
  ggml_tensor* mask_base = nullptr;
  if (s.mask != Mask::kNone) {
    const int64_t ne0 = s.total + s.mask_extra_cols, ne1 = s.rows + s.mask_extra_rows;
    mask_base = ggml_new_tensor_1d(
        ctx, GGML_TYPE_F16,
        ne0 * ne1 * s.mask_heads * s.mask_streams + static_cast<int64_t>(s.mask_offset) + 2);
    const size_t e = sizeof(ggml_fp16_t);
    n->mask = ggml_view_4d(ctx, mask_base, ne0, ne1, s.mask_heads, s.mask_streams,
                           static_cast<size_t>(ne0) * e, static_cast<size_t>(ne0 * ne1) * e,
                           static_cast<size_t>(ne0 * ne1 * s.mask_heads) * e, s.mask_offset);
  }
  n->out = ggml_flash_attn_ext(ctx, n->q, n->k, n->v, n->mask,
                               s.scale != 0 ? s.scale : 1.0f / std::sqrt(float(s.d)), s.max_bias,
                               s.softcap);
  if (s.sinks) {
    n->sinks = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, s.heads);
    ggml_flash_attn_ext_add_sinks(n->out, n->sinks);
  }
  if (s.n_kv_max > 0) ggml_flash_attn_ext_set_n_kv_max(n->out, s.n_kv_max);
  ggml_prec_set_acc(n->out, GGML_PREC_F32);
  n->graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(n->graph, n->out);

  // Placed by hand: V's cache of kAliasOfK at K's cache's address, every other tensor in turn.
  size_t bytes = 4096;
  for (ggml_tensor* t = ggml_get_first_tensor(ctx); t != nullptr;
       t = ggml_get_next_tensor(ctx, t)) {
    if (t->view_src == nullptr && t != alias) bytes += ggml_nbytes(t) + 256;
  }
  n->buffer = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), bytes);
  ggml_tallocr talloc = ggml_tallocr_new(n->buffer);
  for (ggml_tensor* t = ggml_get_first_tensor(ctx); t != nullptr;
       t = ggml_get_next_tensor(ctx, t)) {
    if (t->view_src != nullptr) {
      ASSERT_EQ(ggml_backend_view_init(t), GGML_STATUS_SUCCESS);
    } else if (s.guard && t != alias) {
      PlaceBeforeGuardPage(n, t);
      if (::testing::Test::HasFatalFailure()) return;
    } else if (t == alias) {
      ASSERT_EQ(ggml_backend_tensor_alloc(n->buffer, t, n->k_base->data), GGML_STATUS_SUCCESS);
    } else {
      ASSERT_EQ(ggml_tallocr_alloc(&talloc, t), GGML_STATUS_SUCCESS);
    }
  }

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  fa_harness::FillNaN(q_base);
  fa_harness::ForEach(n->q, [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    fa_harness::Store(GGML_TYPE_F32, fa_harness::At(n->q, a, b, c, d), 1.5f * normal(rng));
  });
  for (ggml_tensor* base : {n->k_base, n->v_base}) {
    if (base != nullptr) std::memset(base->data, 0xFF, ggml_nbytes(base));
  }
  std::vector<float> x(static_cast<size_t>(std::max(s.d, dv)));
  for (ggml_tensor* t : {n->k, n->v}) {
    if (t == n->v && s.v_memory != VMemory::kOwn) break;  // V's memory is K's
    for (int64_t b = 0; b < s.streams; ++b)
      for (int64_t g = 0; g < s.kv_heads; ++g)
        for (int64_t j = 0; j < s.total; ++j) {
          const float magnitude = t == n->v ? s.v_magnitude : 1.0f;
          for (int64_t d = 0; d < t->ne[0]; ++d) {
            x[static_cast<size_t>(d)] = magnitude * normal(rng);
          }
          WriteRow(t, j, g, b, x.data());
        }
  }
  if (n->mask != nullptr) {
    fa_harness::FillNaN(mask_base);
    fa_harness::ForEach(n->mask, [&](int64_t j, int64_t i, int64_t h, int64_t b) {
      float m = kNaN;  // cells past n_kv, rows past n_q: never read
      if (j < s.total && i < s.rows) {
        switch (s.mask) {
          case Mask::kCausal:
            m = j <= s.total - s.rows + i ? 0.0f : -kInf;
            break;
          case Mask::kScattered:
            m = fa_harness::Scattered(j, i, h, b);
            break;
          case Mask::kFn:
            m = s.mask_fn(j, i, h, b);
            break;
          default:
            m = uniform(rng);
        }
      }
      fa_harness::Store(GGML_TYPE_F16, fa_harness::At(n->mask, j, i, h, b), m);
    });
  }
  if (n->sinks != nullptr) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const float v =
          s.sink_values.empty() ? 4.0f * uniform(rng) : s.sink_values[static_cast<size_t>(h)];
      fa_harness::Store(GGML_TYPE_F32, fa_harness::At(n->sinks, h, 0, 0, 0), v);
    }
  }
  const int64_t group = s.heads / s.kv_heads;
  for (int64_t b = 0; b < s.streams; ++b)
    for (int64_t g = 0; g < s.kv_heads; ++g)
      for (int64_t j = 0; j < s.total; ++j) {
        bool seen = false;
        for (int64_t h = g * group; h < (g + 1) * group && !seen; ++h)
          for (int64_t i = 0; i < s.rows && !seen; ++i) seen = MaskTerm(*n, j, i, h, b) != -kInf;
        for (bool is_v : {false, true}) {
          const bool p = (s.poison_hidden && !seen) || (s.poison && s.poison(is_v, j, g, b));
          if (p) PoisonRow(is_v ? n->v : n->k, j, g, b, s.poison_value);
        }
      }
}

enum class QRound {
  kCache,  // q rounded to K's float type (float32 for block types: attnrt's float32 query)
  kQ8Ref,  // block K: q through quantize_row_q8_0_ref (the backend's ggml_rows.cpp)
  kQ8Cpu,  // block K: q through Q8_0 as ggml's CPU backend on x86 quantizes it
};

struct Ref {
  std::vector<double> out;  // [B][S][H][Dv]
  double v_max = 0;         // largest finite |V| element
};

// float64, ggml's definition of the node, from the tensors' memory.
inline Ref Reference(const TNode& n, QRound round) {
  const ggml_tensor *q = n.q, *k = n.k, *v = n.v;
  const int64_t D = q->ne[0], S = q->ne[1], H = q->ne[2], B = q->ne[3], T = k->ne[1];
  const int64_t Dv = v->ne[0], G = k->ne[2], group = H / G;
  float scale, softcap;
  std::memcpy(&scale, reinterpret_cast<const float*>(n.out->op_params) + 0, 4);
  std::memcpy(&softcap, reinterpret_cast<const float*>(n.out->op_params) + 2, 4);
  if (softcap != 0) scale /= softcap;
  std::vector<float> kf(static_cast<size_t>(B * G * T * D)),
      vf(static_cast<size_t>(B * G * T * Dv));
  Ref r;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < T; ++j) {
        const size_t at = static_cast<size_t>((b * G + g) * T + j);
        RowToFloat(k, j, g, b, &kf[at * static_cast<size_t>(D)]);
        RowToFloat(v, j, g, b, &vf[at * static_cast<size_t>(Dv)]);
        for (int64_t d = 0; d < Dv; ++d) {
          const double x = vf[at * static_cast<size_t>(Dv) + static_cast<size_t>(d)];
          if (std::isfinite(x)) r.v_max = std::max(r.v_max, std::fabs(x));
        }
      }
  r.out.assign(static_cast<size_t>(Dv * H * S * B), 0.0);
  std::vector<float> qr(static_cast<size_t>(D));
  std::vector<char> blocks(ggml_is_quantized(k->type) ? ggml_row_size(GGML_TYPE_Q8_0, D) : 1);
  std::vector<double> acc(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        std::vector<float> q32(static_cast<size_t>(D));
        for (int64_t d = 0; d < D; ++d) {
          q32[static_cast<size_t>(d)] =
              fa_harness::Load(GGML_TYPE_F32, fa_harness::At(q, d, i, h, b));
        }
        if (!ggml_is_quantized(k->type)) {
          for (int64_t d = 0; d < D; ++d)
            qr[static_cast<size_t>(d)] = fa_harness::Round(k->type, q32[static_cast<size_t>(d)]);
        } else if (round == QRound::kQ8Ref) {
          const ggml_type_traits* q8 = ggml_get_type_traits(GGML_TYPE_Q8_0);
          q8->from_float_ref(q32.data(), blocks.data(), D);
          q8->to_float(blocks.data(), qr.data(), D);
        } else if (round == QRound::kQ8Cpu) {
          fa_quant::CpuQ8_0(q32.data(), qr.data(), D);
        } else {
          qr = q32;
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
          for (int64_t d = 0; d < Dv; ++d) {
            acc[static_cast<size_t>(d)] =
                acc[static_cast<size_t>(d)] * ms + (vrow != nullptr ? vrow[d] * vs : 0.0);
          }
          sum = sum * ms + vs;
        };
        const int64_t g = h / group;
        for (int64_t j = 0; j < T; ++j) {
          const float mv = MaskTerm(n, j, i, h, b);
          if (mv == -kInf) continue;
          const size_t row = static_cast<size_t>((b * G + g) * T + j);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += double{qr[static_cast<size_t>(d)]} *
                   kf[row * static_cast<size_t>(D) + static_cast<size_t>(d)];
          }
          double sc = dot * scale;
          if (softcap != 0) sc = softcap * std::tanh(sc);
          add(sc + mv, &vf[row * static_cast<size_t>(Dv)]);
        }
        if (n.sinks != nullptr) {
          add(fa_harness::Load(GGML_TYPE_F32, fa_harness::At(n.sinks, h, 0, 0, 0)), nullptr);
        }
        for (int64_t d = 0; d < Dv; ++d) {
          r.out[static_cast<size_t>(((b * S + i) * H + h) * Dv + d)] =
              sum == 0 ? 0.0 : acc[static_cast<size_t>(d)] / sum;
        }
      }
  return r;
}

inline ggml_status Run(ggml_backend_t backend, const TNode& n, std::vector<float>* out) {
  std::vector<float> poison(static_cast<size_t>(ggml_nelements(n.out)), kNaN);
  std::memcpy(n.out->data, poison.data(), ggml_nbytes(n.out));
  const ggml_status status = ggml_backend_graph_compute(backend, n.graph);
  out->resize(poison.size());
  std::memcpy(out->data(), n.out->data, ggml_nbytes(n.out));
  return status;
}

// The relative bound of attnrt's rounding: its query, bias, sinks and output are of K's type
// (float32 for block types).
inline double Tolerance(ggml_type k_type) {
  if (ggml_is_quantized(k_type)) return 2e-5;
  return fa_harness::Tolerance(k_type);
}

inline bool Near(float got, double want, double tol, double scale) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return double{got} == want;
  return std::fabs(double{got} - want) <= tol * (scale + std::fabs(want));
}

// Elements of `got` near neither reference (NaN must match NaN); the first few reported.
inline size_t Mismatches(const std::string& who, const TNode& n, const std::vector<float>& got,
                         const std::vector<double>& want, const std::vector<double>* other,
                         double tol, double scale) {
  const int64_t Dv = n.out->ne[0], H = n.out->ne[1], S = n.out->ne[2];
  size_t bad = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    if (Near(got[e], want[e], tol, scale)) continue;
    if (other != nullptr && Near(got[e], (*other)[e], tol, scale)) continue;
    if (bad++ < 4) {
      const int64_t x = static_cast<int64_t>(e);
      ADD_FAILURE() << who << ": element d " << x % Dv << " head " << x / Dv % H << " row "
                    << x / (Dv * H) % S << " stream " << x / (Dv * H * S) << " is " << got[e]
                    << ", float64 reference " << want[e]
                    << (other != nullptr ? " (or " + std::to_string((*other)[e]) + ")" : "");
    }
  }
  return bad;
}

struct Outcome {
  bool claimed = false;
  size_t attnrt_bad = 0;
};

inline std::string TypeNames(const TSpec& s) {
  return std::string(ggml_type_name(s.k_type)) + "/" +
         ggml_type_name(s.v_memory == VMemory::kLeadingOfK ? s.k_type : s.v_type) + " D " +
         std::to_string(s.d) + " Dv " + std::to_string(s.Dv());
}

// The contract on one node. expect_claim: the backend's documentation says it serves the node.
// threads > 0: the attnrt backend's thread count for the run.
inline Outcome Check(const TSpec& s, uint64_t seed, const std::string& what,
                     bool expect_claim = true, bool check_cpu = true, int threads = 0) {
  const std::string name = TypeNames(s) + " " + what;
  SCOPED_TRACE(name + " (seed " + std::to_string(seed) + ")");
  fa_harness::Backends& be = Shared();
  Outcome o;
  EXPECT_NE(be.attnrt, nullptr);
  if (be.attnrt == nullptr) return o;
  TNode n;
  Build(s, seed, &n);
  if (::testing::Test::HasFatalFailure()) return o;
  const bool block_k = ggml_is_quantized(s.k_type);
  const Ref want = Reference(n, QRound::kCache);
  Ref alt;  // block K: a row attnrt computes again by ggml's algorithm takes q through Q8_0
  if (block_k) alt = Reference(n, QRound::kQ8Ref);
  const double tol = Tolerance(s.k_type);
  // Errors are measured against the size of V's elements (float rounding is relative).
  const double scale = want.v_max > 0 ? want.v_max : 1.0;
  std::vector<float> got;
  o.claimed = ggml_backend_supports_op(be.attnrt, n.out);
  if (expect_claim) {
    EXPECT_TRUE(o.claimed) << name << " declined";
  }
  if (o.claimed) {
    // A thread count of its own: a backend of its own, as a host makes one per context.
    ggml_backend_t backend = threads > 0 ? be.NewAttnrt() : be.attnrt;
    if (threads > 0) be.SetThreads(backend, threads);
    EXPECT_EQ(Run(backend, n, &got), GGML_STATUS_SUCCESS);
    o.attnrt_bad =
        Mismatches("attnrt " + name, n, got, want.out, block_k ? &alt.out : nullptr, tol, scale);
    EXPECT_EQ(o.attnrt_bad, 0u);
    if (threads > 0) ggml_backend_free(backend);
  }
  if (check_cpu && be.cpu != nullptr) {  // (none where ggml's CPU variant cannot load: valgrind)
    // ggml's CPU backend accumulates an F16 V in float16 (ggml_vec_mad_f16), and quantizes q to
    // Q8_0 for block K.
    const Ref cpu_want = block_k ? Reference(n, QRound::kQ8Cpu) : want;
    const double cpu_tol = std::max(5 * tol, s.v_type == GGML_TYPE_F16 ? 1e-2 : 0.0);
    EXPECT_EQ(Run(be.cpu, n, &got), GGML_STATUS_SUCCESS);
    EXPECT_EQ(Mismatches("ggml CPU " + name, n, got, cpu_want.out, nullptr, cpu_tol, scale), 0u)
        << "the reference is not ggml's op";
  }
  return o;
}

constexpr ggml_type kServed[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                 GGML_TYPE_Q4_0};

// Pairs of two types llama.cpp makes (-ctk/-ctv) and their mirrors.
struct Pair {
  ggml_type k, v;
};
constexpr Pair kPairs[] = {
    {GGML_TYPE_F16, GGML_TYPE_Q4_0},  {GGML_TYPE_Q4_0, GGML_TYPE_F16},
    {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0}, {GGML_TYPE_Q4_0, GGML_TYPE_Q8_0},
    {GGML_TYPE_F16, GGML_TYPE_F32},   {GGML_TYPE_F32, GGML_TYPE_F16},
    {GGML_TYPE_BF16, GGML_TYPE_Q8_0}, {GGML_TYPE_Q8_0, GGML_TYPE_BF16},
    {GGML_TYPE_BF16, GGML_TYPE_F32},  {GGML_TYPE_F16, GGML_TYPE_BF16},
};

inline TSpec WithPair(const Pair& p) {
  TSpec s;
  s.k_type = p.k;
  s.v_type = p.v;
  return s;
}

// The NMSE of attnrt's output against ggml's CPU backend's, llama.cpp's own acceptance of a
// backend's FLASH_ATTN_EXT (test-backend-ops: at most 5e-4).
inline double NmseAgainstCpu(const TSpec& s, uint64_t seed) {
  fa_harness::Backends& be = Shared();
  if (be.cpu == nullptr || be.attnrt == nullptr) return kNaN;
  TNode n;
  Build(s, seed, &n);
  std::vector<float> cpu, got;
  EXPECT_EQ(Run(be.cpu, n, &cpu), GGML_STATUS_SUCCESS);
  EXPECT_EQ(Run(be.attnrt, n, &got), GGML_STATUS_SUCCESS);
  double diff = 0, norm = 0;
  for (size_t e = 0; e < cpu.size(); ++e) {
    diff += (double{cpu[e]} - got[e]) * (double{cpu[e]} - got[e]);
    norm += double{cpu[e]} * cpu[e];
  }
  // An all-zero output (a Q8_0/Q4_0 V whose float16 block scales underflow to 0 at 1e-6) matches
  // only zeros.
  if (norm == 0) return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return diff / norm;
}

}  // namespace fa_two_types

#endif  // ATTNRT_TESTS_GGML_FLASH_ATTN_EXT_TWO_TYPES_HARNESS_H_
