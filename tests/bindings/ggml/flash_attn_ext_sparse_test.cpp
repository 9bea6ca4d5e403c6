// FLASH_ATTN_EXT nodes with a sparse mask (ggml_flash_attn_ext_set_n_kv_max: at most n_kv_max keys
// of a row not -inf, as DeepSeek's sparse attention makes), which the backend serves by gathering
// each row's visible keys (docs/llama-cpp.md, "What it serves"): every element against the float64
// reference of ggml's definition (flash_attn_ext_harness.h, flash_attn_ext_quant_harness.h), with
// the keys the mask hides holding NaN K and V that must never be read.
#include <gtest/gtest.h>

#include "flash_attn_ext_harness.h"
#include "flash_attn_ext_quant_harness.h"

namespace {

using fa_harness::Check;
using fa_harness::kInf;
using fa_harness::kNaN;
using fa_harness::Seed;
using fa_harness::Shared;
using fa_harness::Spec;

// Whether key j is visible to row i of stream b: about one key in `every`, at positions that differ
// by row and stream, with row 2 seeing none and, where `crowded`, row 3 seeing every key.
bool Visible(int64_t j, int64_t i, int64_t b, int64_t every, bool crowded) {
  if (i == 2) return false;
  if (crowded && i == 3) return true;
  return static_cast<uint64_t>(j * 37 + i * 11 + b * 5) % static_cast<uint64_t>(every) == 0;
}

// The most keys a row sees when one in `every` of `total` are.
int32_t Bound(int64_t total, int64_t every) { return static_cast<int32_t>(total / every + 1); }

// The sparse mask: a visible key's entry in [-1, 1) (different per key, row and stream), -inf
// elsewhere.
std::function<float(int64_t, int64_t, int64_t, int64_t)> SparseMask(int64_t every,
                                                                    bool crowded = false) {
  return [=](int64_t j, int64_t i, int64_t, int64_t b) {
    return Visible(j, i, b, every, crowded)
               ? static_cast<float>((j * 13 + i * 7 + b * 3) % 16) / 8.0f - 1.0f
               : -kInf;
  };
}

// NaN in every K and V element of a key the row's mask hides from every row: a gather that read a
// hidden key would turn its row NaN (ggml's algorithm would then compute it, counted by GgmlRows).
std::function<float(bool, int64_t, int64_t, int64_t, int64_t, float)> NaNWhereHidden(
    int64_t rows, int64_t every) {
  return [=](bool, int64_t, int64_t j, int64_t, int64_t b, float x) {
    for (int64_t i = 0; i < rows; ++i) {
      if (Visible(j, i, b, every, false)) return x;
    }
    return kNaN;
  };
}

TEST(GgmlFlashAttnExtSparse, DecodeAndPromptRowsOfEveryFloatType) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (int64_t rows : {1, 7}) {
      for (int64_t head_size : {64, 128}) {
        Spec s;
        s.kv_type = type;
        s.head_size = head_size;
        s.rows = rows;
        s.heads = 8;
        s.kv_heads = 2;
        s.total = 300;
        s.streams = 2;
        s.mask_streams = 2;
        s.mask_fn = SparseMask(9);
        s.n_kv_max = Bound(s.total, 9);
        s.edit_kv = NaNWhereHidden(rows, 9);
        const uint64_t redone = Shared().GgmlRows();
        const fa_harness::Outcome o =
            Check(s, Seed() + static_cast<uint64_t>(index++),
                  std::string(ggml_type_name(type)) + " rows " + std::to_string(rows) + " D " +
                      std::to_string(head_size));
        EXPECT_TRUE(o.claimed);
        // Row 2 sees no key (0 in ggml) and is the one row ggml's algorithm may redo.
        EXPECT_LE(Shared().GgmlRows() - redone, rows > 2 ? 2u * 8u : 0u)
            << "rows computed again: a hidden key was read";
      }
    }
  }
}

// ALiBi (a bias per head), sinks, a softcap, and a row with more visible keys than n_kv_max (ggml
// requires the bound; the backend serves the row whole anyway).
TEST(GgmlFlashAttnExtSparse, AlibiSinksSoftcapAndACrowdedRow) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (bool sinks : {false, true}) {
      Spec s;
      s.kv_type = type;
      s.rows = 6;
      s.heads = 8;
      s.kv_heads = 8;
      s.total = 200;
      s.max_bias = 8.0f;
      s.softcap = 20.0f;
      s.sinks = sinks;
      s.mask_fn = SparseMask(7, /*crowded=*/true);
      s.n_kv_max = Bound(s.total, 7);
      const fa_harness::Outcome o =
          Check(s, Seed() + 100 + static_cast<uint64_t>(index++),
                std::string("ALiBi ") + ggml_type_name(type) + (sinks ? " sinks" : ""));
      EXPECT_TRUE(o.claimed);
    }
  }
}

// More rows than one call's gathered bias holds (16 heads of ALiBi, 4097 keys of float32 a row):
// the rows are taken in several calls.
TEST(GgmlFlashAttnExtSparse, RowsInSeveralCalls) {
  Spec s;
  s.kv_type = GGML_TYPE_F32;
  s.head_size = 8;
  s.heads = 16;
  s.kv_heads = 4;
  s.total = 8192;
  s.rows = 150;
  s.max_bias = 8.0f;
  s.mask_fn = SparseMask(2);
  s.n_kv_max = Bound(s.total, 2);
  EXPECT_TRUE(Check(s, Seed() + 200, "n_q 150, n_kv_max 4097 of 8192").claimed);
}

// A mask with one slice per head would need a table per head: declined, computed by the CPU
// backend. n_kv_max of at least n_kv is no sparse mask at all.
TEST(GgmlFlashAttnExtSparse, PerHeadMasksAreDeclinedAndWideBoundsAreDense) {
  Spec s;
  s.mask_heads = 2;
  s.mask_fn = SparseMask(5);
  s.n_kv_max = Bound(s.total, 5);
  EXPECT_FALSE(Check(s, Seed() + 300, "a sparse mask per head").claimed);
  Spec dense;
  dense.mask_fn = SparseMask(5);
  dense.n_kv_max = static_cast<int32_t>(dense.total);
  EXPECT_TRUE(Check(dense, Seed() + 301, "n_kv_max = n_kv").claimed);
}

TEST(GgmlFlashAttnExtSparse, QuantizedCaches) {
  int index = 0;
  for (ggml_type type : fa_quant::kTypes) {
    for (int64_t rows : {1, 6}) {
      fa_quant::QSpec s;
      s.k_type = s.v_type = type;
      s.head_size = 128;
      s.rows = rows;
      s.heads = 8;
      s.kv_heads = 2;
      s.total = 256;
      s.mask = fa_quant::MaskKind::kFn;
      s.mask_fn = SparseMask(6);
      s.n_kv_max = Bound(s.total, 6);
      s.sinks = rows > 1;
      // Row 2 sees no key: attnrt's answer for it may be computed again by ggml's algorithm.
      fa_quant::Check(s, Seed() + 400 + static_cast<uint64_t>(index++),
                      fa_quant::Name(type) + " sparse rows " + std::to_string(rows),
                      /*check_cpu=*/true, /*count_rows=*/false);
    }
  }
}

}  // namespace
