// libattnrt_ggml.so against ggml's own CPU backend on FLASH_ATTN_EXT nodes built through ggml's
// public API, for what llama.cpp's test-backend-ops does not reach: masks of llama.cpp's shape
// (causal over a cache, padding cells, several sequences in one cache), which the backend computes
// with causal attention, and masks that only look causal (a NaN or a finite value past the
// diagonal), which it must not. Random inputs (the seed is printed; ATTNRT_TEST_SEED repeats it),
// the output poisoned, every element compared.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flash_attn_ext_harness.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace {

using fa_harness::Backends;
using fa_harness::Seed;
using fa_harness::Shared;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

struct Case {
  int64_t head_size = 128, rows = 24, heads = 8, kv_heads = 2, total = 256;
  ggml_type kv_type = GGML_TYPE_F16;
  // mask[i][j] for query row i and cache cell j (the F16 values as floats).
  std::vector<float> mask;
};

// The node's inputs as the tensors hold them (K/V after rounding to the cache's type).
struct Inputs {
  std::vector<float> q, k, v, mask;
};

std::vector<float> RoundTo(ggml_type type, std::vector<float> f) {
  if (type == GGML_TYPE_F16) {
    std::vector<ggml_fp16_t> h(f.size());
    ggml_fp32_to_fp16_row(f.data(), h.data(), static_cast<int64_t>(f.size()));
    ggml_fp16_to_fp32_row(h.data(), f.data(), static_cast<int64_t>(f.size()));
  } else if (type == GGML_TYPE_BF16) {
    std::vector<ggml_bf16_t> h(f.size());
    ggml_fp32_to_bf16_row_ref(f.data(), h.data(), static_cast<int64_t>(f.size()));
    ggml_bf16_to_fp32_row(h.data(), f.data(), static_cast<int64_t>(f.size()));
  }
  return f;
}

Inputs MakeInputs(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto draw = [&](int64_t n, float sd) {
    std::vector<float> f(static_cast<size_t>(n));
    for (float& x : f) x = sd * normal(rng);
    return f;
  };
  Inputs in;
  in.q = draw(c.head_size * c.heads * c.rows, 1.5f);  // sharp attention: a wrong key set shows
  in.k = RoundTo(c.kv_type, draw(c.head_size * c.kv_heads * c.total, 1.0f));
  in.v = RoundTo(c.kv_type, draw(c.head_size * c.kv_heads * c.total, 1.0f));
  in.mask = RoundTo(GGML_TYPE_F16, c.mask);
  return in;
}

void Set(ggml_tensor* t, const std::vector<float>& f) {
  if (t->type == GGML_TYPE_F32) {
    ggml_backend_tensor_set(t, f.data(), 0, ggml_nbytes(t));
  } else if (t->type == GGML_TYPE_F16) {
    std::vector<ggml_fp16_t> h(f.size());
    ggml_fp32_to_fp16_row(f.data(), h.data(), static_cast<int64_t>(f.size()));
    ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
  } else {
    std::vector<ggml_bf16_t> h(f.size());
    ggml_fp32_to_bf16_row_ref(f.data(), h.data(), static_cast<int64_t>(f.size()));
    ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
  }
}

float Scale(const Case& c) { return 1.0f / std::sqrt(static_cast<float>(c.head_size)); }

// Computes the node on `backend`; returns its output [D, H, S].
std::vector<float> Run(ggml_backend_t backend, const Case& c, const Inputs& in) {
  ggml_init_params params = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(params);
  // llama.cpp's layout: q [D, S, H] from [D, H, S], K/V [D, T, Hkv] views of a token-major cache.
  ggml_tensor* q0 = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c.head_size, c.heads, c.rows);
  ggml_tensor* q = ggml_permute(ctx, q0, 0, 2, 1, 3);
  ggml_tensor* k0 = ggml_new_tensor_3d(ctx, c.kv_type, c.head_size, c.kv_heads, c.total);
  ggml_tensor* v0 = ggml_new_tensor_3d(ctx, c.kv_type, c.head_size, c.kv_heads, c.total);
  ggml_tensor* k = ggml_permute(ctx, k0, 0, 2, 1, 3);
  ggml_tensor* v = ggml_permute(ctx, v0, 0, 2, 1, 3);
  ggml_tensor* mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, c.total, c.rows);
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, Scale(c), 0, 0);
  ggml_prec_set_acc(out, GGML_PREC_F32);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
  Set(q0, in.q);
  Set(k0, in.k);
  Set(v0, in.v);
  Set(mask, in.mask);
  std::vector<float> result(static_cast<size_t>(ggml_nelements(out)),
                            std::numeric_limits<float>::quiet_NaN());  // poisoned
  ggml_backend_tensor_set(out, result.data(), 0, ggml_nbytes(out));
  EXPECT_EQ(ggml_backend_graph_compute(backend, graph), GGML_STATUS_SUCCESS);
  ggml_backend_tensor_get(out, result.data(), 0, ggml_nbytes(out));
  ggml_backend_buffer_free(buffer);
  ggml_free(ctx);
  return result;
}

// float64, from ggml's definition of the op: per row i and head h, softmax over the cells j the
// mask does not hide (-inf) of scale * q.k_j + mask[i][j], times V; a NaN score makes the row NaN.
std::vector<double> Reference(const Case& c, const Inputs& in) {
  std::vector<double> out(static_cast<size_t>(c.head_size * c.heads * c.rows));
  const int64_t group = c.heads / c.kv_heads;
  const int64_t d_n = c.head_size;
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> score(static_cast<size_t>(c.total));
      double m = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t j = 0; j < c.total; ++j) {
        const double bias = in.mask[static_cast<size_t>(i * c.total + j)];
        double dot = 0;
        for (int64_t d = 0; d < d_n; ++d) {
          dot += static_cast<double>(in.q[static_cast<size_t>((i * c.heads + h) * d_n + d)]) *
                 in.k[static_cast<size_t>((j * c.kv_heads + g) * d_n + d)];
        }
        score[static_cast<size_t>(j)] = static_cast<double>(Scale(c)) * dot + bias;
        nan = nan || std::isnan(score[static_cast<size_t>(j)]);
        m = std::max(m, score[static_cast<size_t>(j)]);
      }
      double* o = &out[static_cast<size_t>((i * c.heads + h) * d_n)];
      if (nan) {
        for (int64_t d = 0; d < d_n; ++d) o[d] = std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < c.total; ++j) {
        if (std::isinf(score[static_cast<size_t>(j)])) continue;
        const double p = std::exp(score[static_cast<size_t>(j)] - m);
        sum += p;
        for (int64_t d = 0; d < d_n; ++d) {
          o[d] += p * in.v[static_cast<size_t>((j * c.kv_heads + g) * d_n + d)];
        }
      }
      for (int64_t d = 0; d < d_n; ++d) o[d] = sum > 0 ? o[d] / sum : 0.0;
    }
  }
  return out;
}

// Elements of `got` outside atol + rtol |want| of the reference (NaN where it is NaN).
size_t Mismatches(const char* who, const std::vector<float>& got, const std::vector<double>& want,
                  double atol, double rtol) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = std::isnan(want[i])
                        ? std::isnan(got[i])
                        : std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    if (!ok && bad++ < 5) {
      ADD_FAILURE() << who << " element " << i << ": " << got[i] << ", float64 reference "
                    << want[i];
    }
  }
  return bad;
}

// The backend against the float64 reference, every element, within the cache type's rounding of
// the output and of q (float16: 2e-3 + 2e-3 |ref|; bfloat16: 2e-2 + 2e-2 |ref|). ggml's CPU
// backend is held to a looser bound (it accumulates float16 V in float16): if it fails, the
// reference is not ggml's op.
void ExpectSame(const Case& c, uint64_t seed) {
  Backends& b = Shared();
  ASSERT_NE(b.reg, nullptr) << "ggml_backend_load(" << ATTNRT_GGML_BACKEND_PATH << ") failed";
  ASSERT_NE(b.attnrt, nullptr);
  ASSERT_NE(b.cpu, nullptr) << "no CPU backend in " << ATTNRT_GGML_LIBRARY_DIR;
  const Inputs in = MakeInputs(c, seed);
  const std::vector<double> want = Reference(c, in);
  const double tol = c.kv_type == GGML_TYPE_BF16 ? 2e-2 : 2e-3;
  EXPECT_EQ(Mismatches("attnrt", Run(b.attnrt, c, in), want, tol, tol), 0u) << "seed " << seed;
  EXPECT_EQ(Mismatches("ggml CPU", Run(b.cpu, c, in), want, 5 * tol, 5 * tol), 0u);
}

// llama.cpp's mask for one sequence at positions [past, past + rows) in cells [0, past + rows),
// cells up to `total` padding: row i sees cells <= past + i.
std::vector<float> CausalMask(int64_t rows, int64_t total, int64_t past) {
  std::vector<float> m(static_cast<size_t>(rows * total), kMinusInf);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j <= past + i; ++j) m[static_cast<size_t>(i * total + j)] = 0.0f;
  }
  return m;
}

TEST(GgmlFlashAttnExt, CausalMaskOverACacheTakesTheCausalPath) {
  for (int64_t past : {0, 100, 232}) {
    Case c;
    c.mask = CausalMask(c.rows, c.total, past);
    const uint64_t before = Shared().CausalCalls();
    ExpectSame(c, Seed() + static_cast<uint64_t>(past));
    EXPECT_GT(Shared().CausalCalls(), before) << "past " << past;
  }
}

TEST(GgmlFlashAttnExt, CausalMaskFloat32AndBFloat16Caches) {
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_BF16}) {
    Case c;
    c.kv_type = type;
    c.mask = CausalMask(c.rows, c.total, 150);
    ExpectSame(c, Seed() + 7);
  }
}

TEST(GgmlFlashAttnExt, TwoSequencesInOneCache) {
  // Rows 0..11 are sequence A in cells [0, 140), rows 12..23 sequence B in cells [140, 232):
  // B's rows must not see A's cells, which lie before the diagonal (the mask still decides there).
  Case c;
  c.mask.assign(static_cast<size_t>(c.rows * c.total), kMinusInf);
  for (int64_t i = 0; i < 12; ++i) {
    for (int64_t j = 0; j <= 128 + i; ++j) c.mask[static_cast<size_t>(i * c.total + j)] = 0.0f;
  }
  for (int64_t i = 12; i < 24; ++i) {
    for (int64_t j = 140; j <= 140 + 80 + (i - 12); ++j) {
      c.mask[static_cast<size_t>(i * c.total + j)] = 0.0f;
    }
  }
  ExpectSame(c, Seed() + 11);
}

TEST(GgmlFlashAttnExt, AFiniteOrNaNValuePastTheDiagonalIsNotCausal) {
  // One visible cell after the diagonal (a finite bias) must be attended; a NaN there makes the
  // row NaN, as on the CPU backend.
  for (float value : {0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    Case c;
    c.mask = CausalMask(c.rows, c.total, 100);
    c.mask[static_cast<size_t>(3 * c.total + c.total - 1)] = value;
    const uint64_t before = Shared().CausalCalls();
    ExpectSame(c, Seed() + 13);
    EXPECT_EQ(Shared().CausalCalls(), before) << "value " << value;
  }
}

}  // namespace
