// libattnrt_ggml.so's contract on FLASH_ATTN_EXT nodes of every shape, layout and value ggml
// allows (docs/llama-cpp.md): a node the backend claims (supports_op) is computed within float
// rounding of ggml's definition of the op, with GGML_STATUS_SUCCESS; a node it cannot serve is
// declined. The float64 reference and the node builder are in flash_attn_ext_harness.h; how a
// host drives the backend is flash_attn_ext_runtime_test.cpp.
#include "flash_attn_ext_harness.h"

namespace {

using fa_harness::Causal;
using fa_harness::Check;
using fa_harness::kInf;
using fa_harness::kNaN;
using fa_harness::Layout;
using fa_harness::Outcome;
using fa_harness::Scattered;
using fa_harness::Seed;
using fa_harness::Shared;
using fa_harness::Spec;
using fa_harness::VSource;

TEST(GgmlFlashAttnExtContract, ViewsStridesAndLayouts) {
  struct Variant {
    const char* what;
    std::function<void(Spec*)> set;
  };
  const Variant variants[] = {
      {"q [D, S, H] not permuted", [](Spec* s) { s->q_permuted = false; }},
      {"q rows padded, q at a 4-byte offset",
       [](Spec* s) {
         s->q_row_pad = 5;
         s->q_offset = 4;
       }},
      {"token-major cache, cells and rows padded",
       [](Spec* s) {
         s->cell_pad = 9;
         s->row_pad = 8;
       }},
      {"head-major cache, cells and rows padded",
       [](Spec* s) {
         s->k_layout = s->v_layout = Layout::kHeadMajor;
         s->cell_pad = 9;
         s->row_pad = 8;
       }},
      {"K token-major, V head-major",
       [](Spec* s) {
         s->v_layout = Layout::kHeadMajor;
         s->cell_pad = 3;
       }},
      {"K head-major, V token-major", [](Spec* s) { s->k_layout = Layout::kHeadMajor; }},
      {"V the same tensor as K", [](Spec* s) { s->v_source = VSource::kSameAsK; }},
      {"K and V halves of one cache row",
       [](Spec* s) {
         s->v_source = VSource::kOtherHalfOfK;
         s->cell_pad = 4;
       }},
      {"one kv head, head-major",
       [](Spec* s) {
         s->kv_heads = 1;
         s->k_layout = s->v_layout = Layout::kHeadMajor;
         s->row_pad = 8;
       }},
      {"several streams, padded head-major cache",
       [](Spec* s) {
         s->streams = 3;
         s->k_layout = s->v_layout = Layout::kHeadMajor;
         s->cell_pad = 5;
         s->mask_streams = 3;
       }},
  };
  int index = 0;
  const uint64_t ggml_rows = Shared().GgmlRows();
  for (const Variant& variant : variants) {
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
      for (bool causal : {false, true}) {
        Spec s;
        s.kv_type = type;
        variant.set(&s);
        if (causal) s.mask_fn = Causal(s.rows, s.total);
        const Outcome o = Check(s, Seed() + static_cast<uint64_t>(index++),
                                std::string(variant.what) + " " + ggml_type_name(type) +
                                    (causal ? " causal" : " random mask"));
        EXPECT_TRUE(o.claimed) << variant.what << " " << ggml_type_name(type);
      }
    }
  }
  // Finite rows stand as attnrt computed them.
  EXPECT_EQ(Shared().GgmlRows(), ggml_rows);
}

TEST(GgmlFlashAttnExtContract, MisalignedViewsAreDeclinedOrComputed) {
  // ggml lets a view start at any byte; the CPU backend reads such rows as they are.
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (size_t offset : {size_t{1}, size_t{2}, size_t{3}}) {
      if (offset % ggml_type_size(type) == 0) continue;
      Spec s;
      s.kv_type = type;
      s.kv_offset = offset;
      s.mask_fn = Causal(s.rows, s.total);
      Check(
          s, Seed() + offset,
          std::string("K/V at byte offset ") + std::to_string(offset) + " " + ggml_type_name(type));
    }
  }
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16}) {
    Spec k;  // aligned first stream, a stream stride of a whole number of bytes, not of elements
    k.kv_type = type;
    k.streams = 2;
    k.stream_skew = 1;
    k.mask_fn = Causal(k.rows, k.total);
    Check(k, Seed() + 4, std::string("stream stride + 1 byte ") + ggml_type_name(type));
  }
  {
    // Before allocation (when ggml's scheduler asks) the view's offset into its cache decides.
    ggml_init_params params = {ggml_tensor_overhead() * 8, nullptr, true};
    ggml_context* ctx = ggml_init(params);
    ggml_tensor* q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 2, 4);
    ggml_tensor* cache = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, 64, 33, 2);
    ggml_tensor* k = ggml_view_3d(ctx, cache, 64, 32, 2, cache->nb[1], cache->nb[2], 1);
    ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, k, nullptr, 0.125f, 0, 0);
    EXPECT_FALSE(ggml_backend_supports_op(Shared().attnrt, out)) << "K at byte offset 1";
    ggml_free(ctx);
  }
  Spec s;
  s.q_offset = 2;  // q rows at a 2-byte offset
  Check(s, Seed() + 5, "q at a 2-byte offset");
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (bool causal : {false, true}) {
      Spec m;  // the mask a contiguous view at an odd byte offset
      m.kv_type = type;
      m.mask_offset = 1;
      if (causal) m.mask_fn = Causal(m.rows, m.total);
      Check(m, Seed() + 6, std::string("mask at byte offset 1 ") + ggml_type_name(type));
    }
  }
}

TEST(GgmlFlashAttnExtContract, OverlappingCacheRowsAreDeclinedOrComputed) {
  // ggml lets a view's strides make elements share memory: one cache row seen as every token
  // (token stride 0), one head seen as every kv head (head stride 0), rows overlapping by half
  // (token stride D / 2 elements). ggml's CPU backend reads them as they are.
  struct Strides {
    const char* what;
    double token, head;  // in cache rows (D elements)
  };
  const Strides cases[] = {
      {"token stride 0", 0.0, 1.0},
      {"head stride 0", 2.0, 0.0},
      {"rows overlapping by half", 0.5, 1.0},
  };
  int index = 0;
  for (const Strides& c : cases) {
    for (bool causal : {false, true}) {
      fa_harness::Node n;
      ggml_init_params params = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr,
                                 true};
      n.ctx = ggml_init(params);
      const int64_t d = 64, rows = 3, heads = 4, kv_heads = 2, total = 40;
      const size_t row_bytes = d * sizeof(ggml_fp16_t);
      n.q = ggml_new_tensor_3d(n.ctx, GGML_TYPE_F32, d, rows, heads);
      ggml_tensor* caches[2];
      ggml_tensor* views[2];
      for (int i = 0; i < 2; ++i) {
        caches[i] = ggml_new_tensor_1d(n.ctx, GGML_TYPE_F16, d * kv_heads * total * 2);
        views[i] = ggml_view_3d(n.ctx, caches[i], d, total, kv_heads,
                                static_cast<size_t>(c.token * row_bytes),
                                static_cast<size_t>(c.head * row_bytes), 0);
      }
      n.k = views[0];
      n.v = views[1];
      n.mask = ggml_new_tensor_2d(n.ctx, GGML_TYPE_F16, total, rows);
      n.out = ggml_flash_attn_ext(n.ctx, n.q, n.k, n.v, n.mask, 0.125f, 0, 0);
      n.graph = ggml_new_graph(n.ctx);
      ggml_build_forward_expand(n.graph, n.out);
      n.buffer = ggml_backend_alloc_ctx_tensors_from_buft(n.ctx, ggml_backend_cpu_buffer_type());
      std::mt19937 rng(static_cast<uint32_t>(Seed()) + static_cast<uint32_t>(index++));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (ggml_tensor* t : {n.q, caches[0], caches[1]}) {
        fa_harness::ForEach(t, [&](int64_t a, int64_t b, int64_t e, int64_t f) {
          fa_harness::Store(t->type, fa_harness::At(t, a, b, e, f), normal(rng));
        });
      }
      fa_harness::ForEach(n.mask, [&](int64_t j, int64_t i, int64_t, int64_t) {
        fa_harness::Store(GGML_TYPE_F16, fa_harness::At(n.mask, j, i, 0, 0),
                          causal ? (j <= total - rows + i ? 0.0f : -kInf) : Scattered(j, i, 0, 0));
      });
      const std::vector<double> want = fa_harness::Reference(n);
      std::vector<float> got;
      const std::string what = std::string(c.what) + (causal ? " causal" : "");
      if (ggml_backend_supports_op(Shared().attnrt, n.out)) {
        EXPECT_EQ(fa_harness::Run(Shared().attnrt, n, &got), GGML_STATUS_SUCCESS) << what;
        EXPECT_EQ(fa_harness::Mismatches("attnrt " + what, got, want,
                                         fa_harness::Tolerance(GGML_TYPE_F16)),
                  0u);
      }
      EXPECT_EQ(fa_harness::Run(Shared().cpu, n, &got), GGML_STATUS_SUCCESS);
      EXPECT_EQ(fa_harness::Mismatches("ggml CPU " + what, got, want,
                                       5 * fa_harness::Tolerance(GGML_TYPE_F16)),
                0u);
    }
  }
}

TEST(GgmlFlashAttnExtContract, MasksBroadcastOverHeadsAndStreams) {
  int index = 0;
  for (int64_t mask_heads : {1, 2, 4, 8}) {
    for (int64_t mask_streams : {1, 2, 4}) {
      Spec s;
      s.heads = 8;
      s.kv_heads = 2;
      s.streams = 4;
      s.rows = 3;
      s.mask_heads = mask_heads;
      s.mask_streams = mask_streams;
      s.mask_fn = Scattered;
      Check(
          s, Seed() + static_cast<uint64_t>(index++),
          "mask heads " + std::to_string(mask_heads) + " streams " + std::to_string(mask_streams));
    }
  }
}

TEST(GgmlFlashAttnExtContract, MaskWithMoreRowsAndColumnsThanTheNode) {
  for (bool causal : {false, true}) {
    Spec s;
    s.mask_cols = s.total + 13;
    s.mask_rows = s.rows + 7;  // llama.cpp pads; the padding holds NaN here
    if (causal) s.mask_fn = Causal(s.rows, s.total);
    EXPECT_TRUE(Check(s, Seed() + 3, causal ? "padded causal mask" : "padded mask").claimed);
  }
}

TEST(GgmlFlashAttnExtContract, MoreQueryRowsThanKeys) {
  int index = 0;
  for (int64_t total : {1, 5, 16}) {
    for (int mask : {0, 1, 2, 3}) {
      Spec s;
      s.rows = 23;
      s.total = total;
      s.streams = 2;
      s.mask = mask != 0;
      if (mask == 2) s.mask_fn = Causal(s.rows, s.total);  // early rows see no cell at all
      if (mask == 3) {  // one mask per head and stream, rows split across calls
        s.mask_heads = s.heads;
        s.mask_streams = s.streams;
        s.mask_fn = Scattered;
      }
      Check(s, Seed() + static_cast<uint64_t>(index++),
            "n_q 23, n_kv " + std::to_string(total) + " mask " + std::to_string(mask));
    }
  }
}

TEST(GgmlFlashAttnExtContract, KvLengths) {
  int index = 0;
  for (int64_t total : {1, 2, 97, 1031}) {  // 1031: prime above the largest block
    for (bool causal : {false, true}) {
      Spec s;
      s.total = total;
      s.rows = std::min<int64_t>(3, total);
      s.head_size = 32;
      if (causal) s.mask_fn = Causal(s.rows, s.total);
      EXPECT_TRUE(Check(s, Seed() + static_cast<uint64_t>(index++),
                        "n_kv " + std::to_string(total) + (causal ? " causal" : ""))
                      .claimed);
    }
  }
}

TEST(GgmlFlashAttnExtContract, HeadSizes) {
  int index = 0;
  for (int64_t d : {1, 3, 40, 72, 100, 256, 576, 1024}) {
    for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16}) {
      Spec s;
      s.head_size = d;
      s.kv_type = type;
      s.total = 24;
      Check(s, Seed() + static_cast<uint64_t>(index++),
            "head size " + std::to_string(d) + " " + ggml_type_name(type));
    }
  }
}

TEST(GgmlFlashAttnExtContract, GroupedQueryRatios) {
  int index = 0;
  for (auto hk : {std::pair<int64_t, int64_t>{12, 4}, {7, 1}, {6, 6}, {5, 5}, {9, 3}}) {
    Spec s;
    s.heads = hk.first;
    s.kv_heads = hk.second;
    s.mask_fn = Scattered;
    s.mask_heads = s.heads;
    EXPECT_TRUE(Check(s, Seed() + static_cast<uint64_t>(index++),
                      "H " + std::to_string(hk.first) + " Hkv " + std::to_string(hk.second))
                    .claimed);
  }
}

TEST(GgmlFlashAttnExtContract, SoftcapAndScale) {
  int index = 0;
  for (float softcap : {0.0f, 30.0f, -30.0f, 0.5f}) {
    for (float scale : {0.125f, -0.2f, 1e-3f, 3.0f}) {
      Spec s;
      s.softcap = softcap;
      s.scale = scale;
      Check(s, Seed() + static_cast<uint64_t>(index++),
            "softcap " + std::to_string(softcap) + " scale " + std::to_string(scale));
    }
  }
}

TEST(GgmlFlashAttnExtContract, ScaleOrSoftcapNotFinite) {
  int index = 0;
  for (float scale : {kInf, -kInf, kNaN}) {
    Spec s;
    s.scale = scale;
    Check(s, Seed() + static_cast<uint64_t>(index++), "scale " + std::to_string(scale));
  }
  for (float softcap : {kInf, kNaN}) {
    Spec s;
    s.softcap = softcap;
    Check(s, Seed() + static_cast<uint64_t>(index++), "softcap " + std::to_string(softcap));
  }
}

TEST(GgmlFlashAttnExtContract, AlibiOverManyHeads) {
  // llama.cpp's ALiBi mask: -(distance) up to the diagonal, -inf after; 12 heads (not a power of
  // two), slopes of max_bias 8 as ggml computes them.
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (int64_t mask_heads : {1, 12}) {
      Spec s;
      s.kv_type = type;
      s.heads = 12;
      s.kv_heads = 4;
      s.total = 300;
      s.rows = 6;
      s.max_bias = 8.0f;
      s.mask_heads = mask_heads;
      s.mask_fn = fa_harness::Distance(s.rows, s.total, 1.0f);
      Check(s, Seed() + static_cast<uint64_t>(index++),
            std::string("ALiBi ") + ggml_type_name(type) + " mask heads " +
                std::to_string(mask_heads));
    }
  }
}

TEST(GgmlFlashAttnExtContract, FullyMaskedRows) {
  for (bool sinks : {false, true}) {
    Spec s;
    s.sinks = sinks;
    s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
      return i % 2 == 0 ? -kInf : static_cast<float>(j % 3) - 1.0f;
    };
    Check(s, Seed() + 21, sinks ? "masked rows with sinks" : "masked rows");
  }
}

TEST(GgmlFlashAttnExtContract, HiddenCellsAreNeverRead) {
  // Three sequences in one cache (llama.cpp's unified cache): rows 0-2 see cells [0, 15), rows
  // 3-4 cells [20, 40), and cells [15, 20) belong to a sequence with no row in this batch. Those
  // cells hold NaN and Inf in K and V; ggml skips every cell whose mask entry is -inf, so the
  // output stays finite. Both the mask decided path and the causal one (rows of one sequence).
  auto poisoned = [](bool is_v, int64_t d, int64_t j, int64_t, int64_t, float x) {
    if (j == 16 && d == 1) return is_v ? kInf : kNaN;
    if (j == 18 && d == 0) return is_v ? kNaN : -kInf;
    return x;
  };
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    Spec s;
    s.kv_type = type;
    s.edit_kv = poisoned;
    s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
      return (i < 3 && j < 15) || (i >= 3 && j >= 20) ? 0.0f : -kInf;
    };
    Spec t = s;  // one sequence's rows, causal over cells [20, 40)
    t.rows = 2;
    t.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
      return j >= 20 && j <= 38 + i ? 0.0f : -kInf;
    };
    Spec u = s;  // a sliding window: row i sees cells (i + 20, i + 35]
    u.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
      return j > i + 20 && j <= i + 35 ? 0.0f : -kInf;
    };
    Spec w = t;  // a decode step
    w.rows = 1;
    for (const Spec& spec : {s, t, u, w}) {
      fa_harness::Node n;
      fa_harness::Build(spec, Seed() + 29, &n);
      for (double x : fa_harness::Reference(n)) ASSERT_TRUE(std::isfinite(x));
      const uint64_t before = Shared().GgmlRows();
      Check(spec, Seed() + 29,
            std::string("NaN/Inf in hidden cells ") + ggml_type_name(type) + " case " +
                std::to_string(index++ % 4));
      EXPECT_GT(Shared().GgmlRows(), before);
    }
  }
}

// ggml's definition (its one-row path, the float64 reference): a +inf sink takes all the weight
// (the row is 0 unless a score is NaN or +inf), a -inf sink adds nothing but makes a row that sees
// no cell NaN (exp(-inf - -inf)), a NaN sink makes the row NaN.
TEST(GgmlFlashAttnExtContract, NonFiniteSinks) {
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
    Spec s;
    s.kv_type = type;
    s.sinks = true;
    s.sink_values = {-kInf, kInf, kNaN, 2.5f};
    s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {  // row 1 sees no cell
      return i == 1 ? -kInf : static_cast<float>(j % 3) - 1.0f;
    };
    Check(s, Seed() + 23, std::string("sinks -inf, inf, NaN, 2.5 ") + ggml_type_name(type));
  }
}

// A NaN mask entry makes its row NaN; a +inf entry takes all the weight of its row (ggml's one-row
// path: the row is that cell's value).
TEST(GgmlFlashAttnExtContract, NaNAndInfInTheMask) {
  int index = 0;
  for (float value : {kNaN, kInf}) {
    for (bool causal : {false, true}) {
      Spec s;
      s.rows = 6;
      s.mask_fn = [=](int64_t j, int64_t i, int64_t h, int64_t b) {
        if (i == 2 && j == 7) return value;
        return causal ? (j <= 40 - 6 + i ? 0.0f : -kInf) : Scattered(j, i, h, b);
      };
      Check(s, Seed() + static_cast<uint64_t>(index++),
            std::string(std::isnan(value) ? "NaN" : "+inf") + (causal ? " causal" : " scattered"));
    }
  }
}

TEST(GgmlFlashAttnExtContract, LargeMaskValuesKeepTheirPrecision) {
  // A float16 mask holds values bfloat16 cannot (1000.5), which ggml adds in float32; scaled by an
  // ALiBi slope, float16 loses them too. Rounded as they are, the logits move by up to 4. Without
  // sinks the row is shifted to its largest entry first; with sinks (one more logit of the row)
  // it cannot be, and its rows are computed by ggml's algorithm.
  for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (float max_bias : {0.0f, 3.0f}) {
      for (bool sinks : {false, true}) {
        Spec s;
        s.kv_type = type;
        s.max_bias = max_bias;
        s.sinks = sinks;
        // Weights like the keys', values both types hold exactly (a sink is of the cache's type:
        // docs/llama-cpp.md, "Precision").
        s.sink_values = {-1000.0f, -1004.0f, -1000.0f, -996.0f};
        s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
          return -1000.0f - 0.5f * static_cast<float>((j * 7 + i * 3) % 6);
        };
        Check(s, Seed() + 27,
              std::string("mask near -1000 ") + ggml_type_name(type) + " max_bias " +
                  std::to_string(max_bias) + (sinks ? " sinks" : ""));
      }
    }
  }
}

// ALiBi masks (one bias per head) and bfloat16 caches take the mask converted: of many rows over
// many keys, the rows are taken in calls whose bias stays small (tens of MiB); every row as one.
TEST(GgmlFlashAttnExtContract, ConvertedMasksOfManyRowsAndKeys) {
  int index = 0;
  for (ggml_type type : {GGML_TYPE_F16, GGML_TYPE_BF16}) {
    for (float max_bias : {0.0f, 8.0f}) {
      if (type == GGML_TYPE_F16 && max_bias == 0.0f) continue;  // read in place
      Spec s;
      s.kv_type = type;
      s.head_size = 8;
      s.heads = 16;
      s.kv_heads = 4;
      s.total = 8192;
      s.rows = 80;
      s.max_bias = max_bias;
      s.mask_fn = fa_harness::Distance(s.rows, s.total, 64.0f);
      Check(s, Seed() + static_cast<uint64_t>(index++),
            std::string("n_q 80, n_kv 8192, ") + ggml_type_name(type) + " max_bias " +
                std::to_string(max_bias));
    }
  }
}

}  // namespace
