// FLASH_ATTN_EXT nodes with a sparse mask whose values test the backend's conversions: mask
// entries of large magnitude (with and without sinks), ALiBi over many heads and with a slope that
// underflows to 0, Q8_0/Q4_0 caches with NaN block scales in hidden cells, many rows on 1-4
// threads, and masks of several head slices (declined). The cases and the reference as in
// flash_attn_ext_sparse_test.cpp.
#include <gtest/gtest.h>

#include "flash_attn_ext_harness.h"
#include "flash_attn_ext_quant_harness.h"
#include "flash_attn_ext_sparse_cases.h"

namespace {

using fa_harness::Check;
using fa_harness::kInf;
using fa_harness::kNaN;
using fa_harness::Seed;
using fa_harness::Shared;
using fa_harness::Spec;
using namespace fa_sparse;

TEST(GgmlFlashAttnExtSparse, LargeMaskMagnitudes) {
  int index = 0;
  // Not float32: its 2e-5 tolerance is below float32's rounding of s + 30000 (the CPU backend
  // misses it too). A logit near -60000 is itself rounded to float32's 2^-8 there (half an ulp,
  // 0.002, each), which moves the gap between two weights by up to 0.004 and an output element by
  // up to 0.4 % of |v - o| <= 2: float16 is held to 8e-3 (its own 2e-3 was missed by 1.3e-3 under
  // ATTNRT_TEST_SEED=1888939870), bfloat16 to its 1.6e-2.
  for (ggml_type type : {GGML_TYPE_BF16, GGML_TYPE_F16}) {
    for (float max_bias : {0.0f, 2.0f}) {
      Spec s;
      s.kv_type = type;
      s.rows = 10;
      s.heads = 4;
      s.kv_heads = 2;
      s.total = 100;
      s.max_bias = max_bias;
      s.mask_fn = LargeEntries(6);
      s.n_kv_max = Bound(s.total, 6);
      s.edit_kv = NaNWhereHidden(s.rows, 6);
      if (type == GGML_TYPE_F16) s.tolerance = 8e-3;
      EXPECT_TRUE(Check(s, Seed() + 2100 + static_cast<uint64_t>(index++),
                        std::string(ggml_type_name(type)) + " large mask entries" +
                            (max_bias > 0 ? " ALiBi" : ""))
                      .claimed);
    }
  }
}

// The same with sinks (a sink of [-4, 4] next to logits near 1024 or 30000 gets no weight, so
// ggml's answer is that of the node without sinks).
// With sinks a converted mask row keeps its values (docs/llama-cpp.md, "Precision"), so bfloat16
// rounds each entry whole (1025 -> 1024, 30016 -> 29952 or 30080), moving the gaps between a row's
// logits by up to 64 (the output read -0.101 for -0.2745 before such rows were computed by ggml's
// algorithm; the dense path alike).
TEST(GgmlFlashAttnExtSparse, LargeMaskMagnitudesWithSinks) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_BF16, GGML_TYPE_F16}) {
    Spec s;
    s.kv_type = type;
    s.rows = 10;
    s.heads = 4;
    s.kv_heads = 2;
    s.total = 100;
    s.sinks = true;
    s.mask_fn = LargeEntries(6);
    s.n_kv_max = Bound(s.total, 6);
    s.edit_kv = NaNWhereHidden(s.rows, 6);
    if (type == GGML_TYPE_F16) s.tolerance = 8e-3;  // as above: logits near -60000
    EXPECT_TRUE(Check(s, Seed() + 2200 + static_cast<uint64_t>(index++),
                      std::string(ggml_type_name(type)) + " large mask entries, sinks")
                    .claimed);
  }
}

// ALiBi over 12 heads (not a power of two: heads 8-11 take ggml's m1 slopes) with sinks, and a
// negative softcap.
TEST(GgmlFlashAttnExtSparse, AlibiOverHeadsNotAPowerOfTwo) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    Spec s;
    s.kv_type = type;
    s.rows = 4;
    s.heads = 12;
    s.kv_heads = 4;
    s.total = 180;
    s.max_bias = 8.0f;
    s.sinks = type != GGML_TYPE_F32;
    s.softcap = type == GGML_TYPE_F16 ? -15.0f : 0.0f;  // odd in c: the same as +15
    SparseWithNaNHidden(&s, 5);
    EXPECT_TRUE(Check(s, Seed() + 2300 + static_cast<uint64_t>(index++),
                      std::string(ggml_type_name(type)) + " ALiBi, 12 heads")
                    .claimed);
  }
}

// An ALiBi slope that underflows to 0 (max_bias 300 over 4 heads: heads 1-3 have slope 0 in
// float32). ggml skips a key only where slope * mask is -inf; 0 * -inf is NaN, so every hidden key
// of those heads is read and their rows are NaN, while head 0 is ordinary. A gather that tests the
// mask entry instead of slope * entry served those heads finite (e.g. 0.0422 where ggml gives NaN);
// such a node now takes the dense path.
TEST(GgmlFlashAttnExtSparse, AlibiSlopeUnderflowingToZero) {
  Spec s;
  s.kv_type = GGML_TYPE_F32;
  s.rows = 3;
  s.heads = 4;
  s.kv_heads = 2;
  s.total = 60;
  s.max_bias = 300.0f;
  s.mask_fn = SparseMask(5);
  s.n_kv_max = Bound(s.total, 5);
  EXPECT_TRUE(Check(s, Seed() + 2350, "ALiBi slopes of 0").claimed);
}

// Q8_0 and Q4_0 caches whose cells hidden from every row have NaN block scales (float16 0x7E00 in
// every block of K and V): ggml never reads them, the gather must not either. The reference is
// that of the same node with those cells intact (they do not take part), and no row may need
// ggml's algorithm (every row sees a key).
TEST(GgmlFlashAttnExtSparse, QuantizedNaNScalesInHiddenCells) {
  int index = 0;
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  for (ggml_type type : fa_quant::kTypes) {
    for (int64_t rows : {1, 6}) {
      for (int64_t head_size : {96, 256}) {
        fa_quant::QSpec s;
        s.k_type = s.v_type = type;
        s.head_size = head_size;
        s.rows = rows;
        s.heads = head_size == 96 ? 12 : 8;
        s.kv_heads = head_size == 96 ? 1 : 2;
        s.total = 150;
        s.streams = 2;
        s.mask_streams = 2;
        s.head_major = rows == 6 && head_size == 96;
        s.mask = fa_quant::MaskKind::kFn;
        s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t b) {
          return (j * 37 + i * 11 + b * 5) % 9 == 0 ? static_cast<float>((j + i) % 8) / 4.0f - 1.0f
                                                    : -kInf;
        };
        s.n_kv_max = 150 / 9 + 1;
        s.sinks = rows > 1;
        s.max_bias = head_size == 256 ? 8.0f : 0.0f;
        const uint64_t seed = Seed() + 2400 + static_cast<uint64_t>(index++);
        const std::string what = fa_quant::Name(type) + " NaN scales in hidden cells, rows " +
                                 std::to_string(rows) + " D " + std::to_string(head_size);
        SCOPED_TRACE(what + " (seed " + std::to_string(seed) + ")");
        fa_quant::QNode clean;
        fa_quant::Build(s, seed, &clean);
        const fa_quant::Reference want = fa_quant::Compute(clean, false);
        const fa_quant::Reference cpu_want = fa_quant::Compute(clean, true);
        ASSERT_EQ(want.redo_rows, 0u);
        fa_quant::QSpec dirty = s;
        const auto mask_fn = s.mask_fn;
        const int64_t n_rows = rows;
        const size_t block = ggml_type_size(type);
        dirty.edit_row = [=](bool, int64_t j, int64_t, int64_t b, uint8_t* row, size_t bytes) {
          for (int64_t i = 0; i < n_rows; ++i) {
            if (mask_fn(j, i, 0, b) != -kInf) return;
          }
          for (size_t at = 0; at + block <= bytes; at += block) {
            row[at] = 0x00;
            row[at + 1] = 0x7E;  // float16 NaN, little-endian
          }
        };
        fa_quant::QNode n;
        fa_quant::Build(dirty, seed, &n);
        ASSERT_TRUE(ggml_backend_supports_op(be.attnrt, n.out));
        std::vector<float> got;
        const uint64_t before = be.GgmlRows();
        ASSERT_EQ(fa_quant::RunNode(be.attnrt, n, &got), GGML_STATUS_SUCCESS);
        EXPECT_EQ(be.GgmlRows() - before, 0u) << "rows computed again: a hidden cell was read";
        const double atol = 1e-4 * std::max(want.v_max, 1e-3);
        EXPECT_EQ(fa_quant::Mismatches("attnrt " + what, got, want.out, atol), 0u);
        ASSERT_EQ(fa_quant::RunNode(be.cpu, n, &got), GGML_STATUS_SUCCESS);
        EXPECT_EQ(fa_quant::Mismatches("ggml CPU " + what, got, cpu_want.out, 5 * atol), 0u)
            << "the reference is not ggml's op";
      }
    }
  }
}

// Hundreds of rows (several calls' worth of gathered bias) on backends of 1, 2, 3 and 4 threads,
// rows of every kind (row 2 none, row 3 every key).
TEST(GgmlFlashAttnExtSparse, ManyRowsAndThreadCounts) {
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  ggml_backend_t backend = be.NewAttnrt();
  int index = 0;
  for (int threads : {1, 2, 3, 4}) {
    be.SetThreads(backend, threads);
    Spec s;
    s.kv_type = threads % 2 == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    s.head_size = 64;
    s.rows = 333;
    s.heads = 8;
    s.kv_heads = 2;
    s.total = 1500;
    s.streams = threads == 3 ? 2 : 1;
    s.mask_streams = s.streams;
    s.max_bias = threads == 4 ? 8.0f : 0.0f;
    s.sinks = threads >= 3;
    s.mask_fn = SparseMask(13, /*crowded=*/true);
    s.n_kv_max = Bound(s.total, 13);
    EXPECT_TRUE(Check(s, Seed() + 2500 + static_cast<uint64_t>(index++),
                      std::to_string(threads) + " threads, n_q 333", backend,
                      /*check_cpu=*/false)
                    .claimed);
  }
  ggml_backend_free(backend);
}

// A mask with one slice per head (mask->ne[2] = H) or per two heads, in float and quantized
// caches: declined (ggml's CPU backend computes it; Check holds the CPU backend to the reference).
TEST(GgmlFlashAttnExtSparse, MasksOfSeveralHeadSlicesAreDeclined) {
  int index = 0;
  for (int64_t mask_heads : {2, 4, 8}) {
    Spec s;
    s.heads = 8;
    s.kv_heads = 2;
    s.rows = 3;
    s.total = 64;
    s.mask_heads = mask_heads;
    s.mask_fn = [](int64_t j, int64_t i, int64_t h, int64_t) {
      return (j + i + 3 * h) % 6 == 0 ? 0.25f * static_cast<float>(h % 3) : -kInf;
    };
    s.n_kv_max = 64 / 6 + 1;
    EXPECT_FALSE(Check(s, Seed() + 2600 + static_cast<uint64_t>(index++),
                       std::to_string(mask_heads) + " mask head slices")
                     .claimed);
  }
  for (ggml_type type : fa_quant::kTypes) {
    fa_quant::QSpec q;
    q.k_type = q.v_type = type;
    q.heads = 4;
    q.kv_heads = 2;
    q.mask_heads = 2;
    q.mask = fa_quant::MaskKind::kFn;
    q.mask_fn = [](int64_t j, int64_t i, int64_t h, int64_t) {
      return (j + i + h) % 5 == 0 ? 0.0f : -kInf;
    };
    q.n_kv_max = 9;
    fa_quant::QNode n;
    fa_quant::Build(q, Seed() + 2700, &n);
    EXPECT_FALSE(ggml_backend_supports_op(Shared().attnrt, n.out)) << fa_quant::Name(type);
  }
}

}  // namespace
