// FLASH_ATTN_EXT nodes with a sparse mask (ggml_flash_attn_ext_set_n_kv_max: at most n_kv_max keys
// of a row not -inf, as DeepSeek's sparse attention makes), which the backend serves by gathering
// each row's visible keys (docs/llama-cpp.md, "What it serves"): every element against the float64
// reference of ggml's definition (flash_attn_ext_harness.h, flash_attn_ext_quant_harness.h), with
// the keys the mask hides holding NaN K and V that must never be read.
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
        SparseWithNaNHidden(&s, 9);
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

TEST(GgmlFlashAttnExtSparse, NaNAndInfiniteMaskEntriesAmongVisibleKeys) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (float max_bias : {0.0f, 8.0f}) {
      for (bool sinks : {false, true}) {
        Spec s;
        s.kv_type = type;
        s.rows = 8;
        s.heads = 4;
        s.kv_heads = 2;
        s.total = 64;
        s.streams = 2;
        s.mask_streams = 2;
        s.max_bias = max_bias;
        s.sinks = sinks;
        s.mask_fn = NonFiniteEntries();
        s.n_kv_max = 6;
        s.edit_kv = NaNWhereMaskHides(s.mask_fn, s.rows);
        const std::string what = std::string(ggml_type_name(type)) +
                                 (max_bias > 0 ? " ALiBi" : "") + (sinks ? " sinks" : "") +
                                 " NaN/+inf/-65504 mask entries";
        EXPECT_TRUE(Check(s, Seed() + 1000 + static_cast<uint64_t>(index++), what).claimed);
      }
    }
  }
}

// llama.cpp pads the mask: columns past n_kv and rows past n_q. Those hold finite values here (0.5,
// which a scan over the mask's width or height would take for visible keys), the K/V cells past
// n_kv NaN (cell_pad): only the node's n_kv x n_q window may decide what a row sees.
TEST(GgmlFlashAttnExtSparse, FiniteMaskPaddingPastNkvAndNqIsIgnored) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (int64_t streams : {1, 2}) {
      Spec s;
      s.kv_type = type;
      s.rows = 5;
      s.heads = 8;
      s.kv_heads = 2;
      s.total = 90;
      s.streams = streams;
      s.mask_streams = streams;
      s.cell_pad = 64;
      s.mask_cols = s.total + 38;
      s.mask_rows = s.rows + 11;
      SparseWithNaNHidden(&s, 8);
      const int64_t total = s.total, rows = s.rows;
      const uint64_t redone = Shared().GgmlRows();
      const fa_harness::Outcome o = CheckEdited(
          s, Seed() + 1100 + static_cast<uint64_t>(index++),
          std::string(ggml_type_name(type)) + " finite mask padding, streams " +
              std::to_string(streams),
          [=](fa_harness::Node* n) {
            fa_harness::ForEach(n->mask, [&](int64_t j, int64_t i, int64_t h, int64_t b) {
              if (j >= total || i >= rows) {
                fa_harness::Store(GGML_TYPE_F16, fa_harness::At(n->mask, j, i, h, b), 0.5f);
              }
            });
          });
      EXPECT_TRUE(o.claimed);
      // Only row 2 (no key) may be computed again.
      EXPECT_LE(Shared().GgmlRows() - redone, static_cast<uint64_t>(8 * streams))
          << "a cell past n_kv was read";
    }
  }
}

// A mask that is a view starting at byte 1, 2 or 3 of its tensor (the backend converts an odd one
// instead of reading it in place), with padded rows and columns too.
TEST(GgmlFlashAttnExtSparse, MaskAtOddByteOffsets) {
  int index = 0;
  for (size_t offset : {1, 2, 3}) {
    for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_BF16}) {
      Spec s;
      s.kv_type = type;
      s.rows = 6;
      s.heads = 6;
      s.kv_heads = 2;
      s.total = 75;
      s.mask_offset = offset;
      s.mask_cols = offset == 3 ? s.total + 5 : 0;
      s.mask_rows = offset == 3 ? s.rows + 2 : 0;
      SparseWithNaNHidden(&s, 6);
      EXPECT_TRUE(
          Check(s, Seed() + 1200 + static_cast<uint64_t>(index++),
                std::string(ggml_type_name(type)) + " mask at byte " + std::to_string(offset))
              .claimed);
    }
  }
}

// Three streams with one mask for all (mask->ne[3] = 1: stream b reads slice b % 1 = 0) and with
// one mask each; the K/V streams a skewed stride apart and the views off the cache's start.
TEST(GgmlFlashAttnExtSparse, MaskBroadcastOverStreamsAndOnePerStream) {
  int index = 0;
  for (int64_t mask_streams : {1, 3}) {
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16}) {
      Spec s;
      s.kv_type = type;
      s.rows = 4;
      s.heads = 4;
      s.kv_heads = 4;
      s.total = 120;
      s.streams = 3;
      s.mask_streams = mask_streams;
      s.stream_skew = 2 * ggml_type_size(type) * 64;
      s.kv_offset = ggml_type_size(type) * 64 * 4;
      s.mask_fn = SparseMask(10);
      s.n_kv_max = Bound(s.total, 10);
      // Hidden from every row of stream b's mask slice (b % mask_streams).
      MaskFn m = s.mask_fn;
      s.edit_kv = [=](bool, int64_t, int64_t j, int64_t, int64_t b, float x) {
        for (int64_t i = 0; i < 4; ++i) {
          if (m(j, i, 0, b % mask_streams) != -kInf) return x;
        }
        return kNaN;
      };
      EXPECT_TRUE(Check(s, Seed() + 1300 + static_cast<uint64_t>(index++),
                        std::string(ggml_type_name(type)) + " 3 streams, mask streams " +
                            std::to_string(mask_streams))
                      .claimed);
    }
  }
}

// n_kv_max = 1: every row sees one key (row 2 none), the first and the last key among them; over
// two keys (the smallest sparse node) and over 300.
TEST(GgmlFlashAttnExtSparse, OneKeyARow) {
  int index = 0;
  for (int64_t total : {2, 300}) {
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
      Spec s;
      s.kv_type = type;
      s.rows = 7;
      s.heads = 4;
      s.kv_heads = 1;
      s.total = total;
      s.n_kv_max = 1;
      s.sinks = type == GGML_TYPE_F16;
      s.mask_fn = [=](int64_t j, int64_t i, int64_t, int64_t) {
        if (i == 2) return -kInf;
        const int64_t key = i == 0 ? 0 : i == 1 ? total - 1 : (i * 41) % total;
        return j == key ? static_cast<float>(i) - 3.0f : -kInf;
      };
      s.edit_kv = NaNWhereMaskHides(s.mask_fn, s.rows);
      EXPECT_TRUE(
          Check(s, Seed() + 1400 + static_cast<uint64_t>(index++),
                std::string(ggml_type_name(type)) + " n_kv_max 1 of " + std::to_string(total))
              .claimed);
    }
  }
}

// n_kv = 1 with n_kv_max = 1 (a bound that is no bound) and n_q = 0 (nothing to compute).
TEST(GgmlFlashAttnExtSparse, OneKeyCacheAndNoRows) {
  Spec s;
  s.total = 1;
  s.rows = 3;
  s.n_kv_max = 1;
  s.mask_fn = [](int64_t, int64_t i, int64_t, int64_t) { return i == 1 ? -kInf : 0.5f; };
  EXPECT_TRUE(Check(s, Seed() + 1450, "n_kv 1, n_kv_max 1").claimed);

  Spec none;
  none.rows = 0;
  none.mask_rows = 1;
  none.n_kv_max = 3;
  fa_harness::Node n;
  fa_harness::Build(none, Seed() + 1451, &n);
  if (ggml_backend_supports_op(Shared().attnrt, n.out)) {
    EXPECT_EQ(ggml_backend_graph_compute(Shared().attnrt, n.graph), GGML_STATUS_SUCCESS);
  }
}

// More query rows than keys (n_q 50 over 10 keys; the dense path splits such nodes into calls of
// n_kv rows), each row seeing up to 3 keys, in two streams.
TEST(GgmlFlashAttnExtSparse, MoreRowsThanKeys) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16}) {
    Spec s;
    s.kv_type = type;
    s.rows = 50;
    s.heads = 4;
    s.kv_heads = 2;
    s.total = 10;
    s.streams = 2;
    s.mask_streams = 2;
    s.max_bias = type == GGML_TYPE_F16 ? 4.0f : 0.0f;
    s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t b) {
      return (j * 3 + i + b) % 4 == 0 && i != 2 ? static_cast<float>((i + j) % 5) / 4.0f : -kInf;
    };
    s.n_kv_max = 3;
    s.edit_kv = NaNWhereMaskHides(s.mask_fn, s.rows);
    EXPECT_TRUE(Check(s, Seed() + 1500 + static_cast<uint64_t>(index++),
                      std::string(ggml_type_name(type)) + " n_q 50 > n_kv 10")
                    .claimed);
  }
}

// No row sees any key (every entry -inf, every K/V element NaN): 0 without sinks, and with sinks
// 0 for a finite or +inf sink, NaN for a -inf sink (exp(-inf - -inf)) and for a NaN one.
TEST(GgmlFlashAttnExtSparse, NoRowSeesAnyKey) {
  int index = 0;
  const std::vector<std::vector<float>> sink_sets = {{},
                                                     {1.5f, -2.0f, 0.0f, 3.0f},
                                                     {-kInf, -kInf, -kInf, -kInf},
                                                     {kInf, kInf, kInf, kInf},
                                                     {kNaN, -kInf, kInf, 0.25f}};
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (size_t k = 0; k < sink_sets.size(); ++k) {
      Spec s;
      s.kv_type = type;
      s.rows = 5;
      s.heads = 4;
      s.kv_heads = 2;
      s.total = 33;
      s.sinks = k > 0;
      s.sink_values = sink_sets[k];
      s.mask_fn = [](int64_t, int64_t, int64_t, int64_t) { return -kInf; };
      s.n_kv_max = 4;
      s.edit_kv = [](bool, int64_t, int64_t, int64_t, int64_t, float) { return kNaN; };
      EXPECT_TRUE(
          Check(s, Seed() + 1600 + static_cast<uint64_t>(index++),
                std::string(ggml_type_name(type)) + " no key, sink set " + std::to_string(k))
              .claimed);
    }
  }
}

// Every row sees every key but one, or all of them, though n_kv_max says 2 (ggml requires the
// bound; the backend says it serves the rows whole): each row far past any table sized by
// n_q * n_kv_max.
TEST(GgmlFlashAttnExtSparse, EveryRowPastTheBound) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16}) {
    Spec s;
    s.kv_type = type;
    s.rows = 9;
    s.heads = 4;
    s.kv_heads = 2;
    s.total = 130;
    s.n_kv_max = 2;
    s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
      return i % 2 == 0 && j == (i * 13) % 130 ? -kInf : static_cast<float>(j % 7) / 7.0f;
    };
    EXPECT_TRUE(Check(s, Seed() + 1700 + static_cast<uint64_t>(index++),
                      std::string(ggml_type_name(type)) + " rows of 129-130 keys, n_kv_max 2")
                    .claimed);
  }
}

// n_kv_max set on a node without a mask: there is nothing sparse (ggml's CPU backend ignores the
// bound); every key is read.
TEST(GgmlFlashAttnExtSparse, BoundWithoutAMask) {
  Spec s;
  s.mask = false;
  s.rows = 3;
  s.total = 50;
  s.n_kv_max = 4;
  const fa_harness::Outcome o = Check(s, Seed() + 1750, "n_kv_max 4 without a mask");
  EXPECT_TRUE(o.claimed);
}

// V a view of K: the same tensor (MLA's latent cache) and the other half of each K row.
TEST(GgmlFlashAttnExtSparse, VAViewOfK) {
  int index = 0;
  for (fa_harness::VSource source :
       {fa_harness::VSource::kSameAsK, fa_harness::VSource::kOtherHalfOfK}) {
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
      for (int64_t rows : {1, 6}) {
        Spec s;
        s.kv_type = type;
        s.v_source = source;
        s.head_size = 128;
        s.rows = rows;
        s.heads = 8;
        s.kv_heads = 1;
        s.total = 160;
        SparseWithNaNHidden(&s, 7);
        const uint64_t redone = Shared().GgmlRows();
        EXPECT_TRUE(
            Check(s, Seed() + 1800 + static_cast<uint64_t>(index++),
                  std::string(ggml_type_name(type)) +
                      (source == fa_harness::VSource::kSameAsK ? " V = K" : " V = K's half") +
                      " rows " + std::to_string(rows))
                .claimed);
        ExpectOnlyRowTwoRedone(redone, s);
      }
    }
  }
}

// Head-major K and V (ggml's [D, n_kv, H_kv] views), token-major K with head-major V, padded rows
// and cells, views off the cache's start, q not permuted and with padded rows.
TEST(GgmlFlashAttnExtSparse, LayoutsAndPadding) {
  int index = 0;
  using fa_harness::Layout;
  for (int variant = 0; variant < 4; ++variant) {
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16}) {
      Spec s;
      s.kv_type = type;
      s.k_layout = variant == 1 ? Layout::kTokenMajor : Layout::kHeadMajor;
      s.v_layout = variant == 2 ? Layout::kTokenMajor : Layout::kHeadMajor;
      if (variant == 3) s.k_layout = s.v_layout = Layout::kTokenMajor;
      s.row_pad = variant >= 2 ? 8 : 0;
      s.cell_pad = 5;
      s.kv_offset = variant % 2 == 1 ? ggml_type_size(type) * 8 : 0;
      s.q_permuted = variant != 2;
      s.q_row_pad = variant == 3 ? 3 : 0;
      s.rows = 5;
      s.heads = 6;
      s.kv_heads = 3;
      s.total = 140;
      s.streams = 2;
      s.mask_streams = 2;
      SparseWithNaNHidden(&s, 9);
      const uint64_t redone = Shared().GgmlRows();
      EXPECT_TRUE(
          Check(s, Seed() + 1900 + static_cast<uint64_t>(index++),
                std::string(ggml_type_name(type)) + " layout variant " + std::to_string(variant))
              .claimed);
      ExpectOnlyRowTwoRedone(redone, s);
    }
  }
}

// GQA ratios 1, 3, 12 and 16 (heads not a power of two; above 8 the grouped decode gathers each
// key block into scratch, and here every block is one key) and head sizes 64, 96, 128, 256.
TEST(GgmlFlashAttnExtSparse, GqaRatiosAndHeadSizes) {
  struct Shape {
    int64_t heads, kv_heads, head_size;
  };
  const Shape shapes[] = {{4, 4, 96},   {6, 2, 64},  {12, 1, 128}, {24, 2, 96},
                          {16, 1, 256}, {32, 2, 64}, {3, 1, 256}};
  int index = 0;
  for (const Shape& sh : shapes) {
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
      for (int64_t rows : {1, 5}) {
        Spec s;
        s.kv_type = type;
        s.head_size = sh.head_size;
        s.heads = sh.heads;
        s.kv_heads = sh.kv_heads;
        s.rows = rows;
        s.total = 97;
        SparseWithNaNHidden(&s, 4);
        s.max_bias = index % 3 == 0 ? 8.0f : 0.0f;
        const uint64_t redone = Shared().GgmlRows();
        EXPECT_TRUE(Check(s, Seed() + 2000 + static_cast<uint64_t>(index++),
                          std::string(ggml_type_name(type)) + " H " + std::to_string(sh.heads) +
                              " Hkv " + std::to_string(sh.kv_heads) + " D " +
                              std::to_string(sh.head_size) + " rows " + std::to_string(rows) +
                              (s.max_bias > 0 ? " ALiBi" : ""),
                          nullptr, /*check_cpu=*/false)
                        .claimed);
        ExpectOnlyRowTwoRedone(redone, s);
      }
    }
  }
}

}  // namespace
