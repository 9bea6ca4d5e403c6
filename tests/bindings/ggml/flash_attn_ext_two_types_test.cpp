// libattnrt_ggml.so on the FLASH_ATTN_EXT nodes its ABI 1.9 extension claims: K and V of two
// types (llama.cpp's -ctk/-ctv, each of F32, F16, BF16, Q8_0 and Q4_0) and head sizes that are no
// multiple of 8 for F32/F16/BF16 caches (docs/llama-cpp.md), combined with every feature the
// backend serves (masks broadcast over heads and streams, ALiBi, softcap, sinks, sparse masks,
// several streams, n_q > n_kv, head- and token-major, padded and byte-offset views, V in K's
// memory, NaN and inf in hidden cells, thread counts, ggml's scheduler, guard pages after every
// tensor). The contract is the one of
// flash_attn_ext_contract_test.cpp: a claimed node is computed within float rounding of a float64
// reference written from ggml's definition of the op (ggml.h; the CPU backend's
// ggml_compute_forward_flash_attn_ext_f16_one_chunk), with GGML_STATUS_SUCCESS; a node attnrt
// cannot serve is declined. ggml's CPU backend is held to the same reference (looser), which
// checks the reference.
//
// The node builder here lays K and V out byte by byte (each cache its own type, head size,
// layout, padding and offset); memory the views do not cover holds 0xFF bytes (NaN in every float
// type, a NaN scale in every block type), so a read outside a view shows.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flash_attn_ext_two_types_harness.h"

namespace {

using namespace fa_two_types;

// The comparison fails on a single wrong element (the harness's own negative control).
TEST(GgmlFlashAttnExtTwoTypes, TheComparisonCatchesOneWrongElement) {
  TSpec s;
  TNode n;
  Build(s, Seed(), &n);
  ASSERT_FALSE(HasFatalFailure());
  const Ref want = Reference(n, QRound::kCache);
  std::vector<float> got(want.out.begin(), want.out.end());
  got[7] += 0.05f;
  size_t bad = 0;
  ::testing::TestPartResultArray reported;
  {
    ::testing::ScopedFakeTestPartResultReporter quiet(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &reported);
    bad = Mismatches("control", n, got, want.out, nullptr, Tolerance(s.k_type), 1.0);
  }
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(reported.size(), 1);
}

// Every ordered pair of the five served types, token-major, head-major and mixed layouts, random
// and causal masks.
TEST(GgmlFlashAttnExtTwoTypes, EveryPairOfServedTypes) {
  int index = 0;
  for (ggml_type kt : kServed) {
    for (ggml_type vt : kServed) {
      if (kt == vt) continue;
      for (int layout = 0; layout < 3; ++layout) {
        for (Mask mask : {Mask::kUniform, Mask::kCausal}) {
          TSpec s = WithPair({kt, vt});
          s.k.head_major = layout == 1;
          s.v.head_major = layout >= 1;
          if (layout == 2) s.cell_pad = 3;
          s.mask = mask;
          Check(s, Seed() + static_cast<uint64_t>(index++),
                std::string(layout == 0   ? "token-major"
                            : layout == 1 ? "head-major"
                                          : "K token V head") +
                    (mask == Mask::kCausal ? " causal" : " random mask"));
        }
      }
    }
  }
}

TEST(GgmlFlashAttnExtTwoTypes, PairsWithEveryFeature) {
  struct Feature {
    const char* what;
    std::function<void(TSpec*)> set;
  };
  const Feature features[] = {
      {"no mask", [](TSpec* s) { s->mask = Mask::kNone; }},
      {"ALiBi, one mask",
       [](TSpec* s) {
         s->heads = 12;
         s->kv_heads = 4;
         s->max_bias = 8.0f;
         s->mask = Mask::kFn;
         s->mask_fn = fa_harness::Distance(s->rows, s->total, 4.0f);
       }},
      {"ALiBi, a mask per head, sinks",
       [](TSpec* s) {
         s->heads = 8;
         s->max_bias = 3.0f;
         s->mask_heads = 8;
         s->sinks = true;
         s->mask = Mask::kScattered;
       }},
      {"softcap 30",
       [](TSpec* s) {
         s->softcap = 30.0f;
         s->scale = 0.9f;
       }},
      {"softcap -0.5, causal",
       [](TSpec* s) {
         s->softcap = -0.5f;
         s->mask = Mask::kCausal;
       }},
      {"sinks, causal",
       [](TSpec* s) {
         s->sinks = true;
         s->mask = Mask::kCausal;
       }},
      {"sinks near -1000 over a mask near -1000",
       [](TSpec* s) {
         s->sinks = true;
         s->sink_values = {-1000.0f, -1004.0f, -1000.0f, -996.0f};
         s->mask = Mask::kFn;
         s->mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
           return -1000.0f - 0.5f * static_cast<float>((j * 7 + i * 3) % 6);
         };
       }},
      {"3 streams, a mask per head and stream, head-major",
       [](TSpec* s) {
         s->streams = 3;
         s->mask_heads = 4;
         s->mask_streams = 3;
         s->mask = Mask::kScattered;
         s->k.head_major = s->v.head_major = true;
       }},
      {"8 heads, 2 mask slices (head h reads slice h % 2), 4 streams over 2 mask streams",
       [](TSpec* s) {
         s->heads = 8;
         s->mask_heads = 2;
         s->streams = 4;
         s->mask_streams = 2;
         s->mask = Mask::kScattered;
       }},
      {"2 streams, one mask, padded streams",
       [](TSpec* s) {
         s->streams = 2;
         s->mask = Mask::kCausal;
         s->k.stream_pad = 64;
         s->v.stream_pad = 96;
       }},
      {"n_q 23 > n_kv 5, causal",
       [](TSpec* s) {
         s->rows = 23;
         s->total = 5;
         s->streams = 2;
         s->mask = Mask::kCausal;
       }},
      {"n_q 23 > n_kv 16, a mask per head and stream",
       [](TSpec* s) {
         s->rows = 23;
         s->total = 16;
         s->streams = 2;
         s->mask_heads = 4;
         s->mask_streams = 2;
         s->mask = Mask::kScattered;
       }},
      {"n_q 23 > n_kv 7, ALiBi",
       [](TSpec* s) {
         s->rows = 23;
         s->total = 7;
         s->max_bias = 5.0f;
         s->mask = Mask::kUniform;
       }},
      {"H 12 Hkv 4",
       [](TSpec* s) {
         s->heads = 12;
         s->kv_heads = 4;
         s->mask = Mask::kScattered;
         s->mask_heads = 12;
       }},
      {"H 7 Hkv 1",
       [](TSpec* s) {
         s->heads = 7;
         s->kv_heads = 1;
       }},
      {"H 6 Hkv 6, head-major",
       [](TSpec* s) {
         s->heads = 6;
         s->kv_heads = 6;
         s->k.head_major = s->v.head_major = true;
       }},
      {"n_kv 1",
       [](TSpec* s) {
         s->total = 1;
         s->rows = 1;
       }},
      {"n_kv 2, causal",
       [](TSpec* s) {
         s->total = 2;
         s->rows = 2;
         s->mask = Mask::kCausal;
       }},
      {"n_kv 97",
       [](TSpec* s) {
         s->total = 97;
         s->rows = 3;
       }},
      {"n_kv 1031, causal",
       [](TSpec* s) {
         s->total = 1031;
         s->rows = 3;
         s->mask = Mask::kCausal;
       }},
      {"q not permuted, mask padded, at byte offset 2",
       [](TSpec* s) {
         s->q_permuted = false;
         s->mask_extra_cols = 13;
         s->mask_extra_rows = 7;
         s->mask_offset = 2;
       }},
      {"mask at byte offset 1, causal",
       [](TSpec* s) {
         s->mask_offset = 1;
         s->mask = Mask::kCausal;
       }},
      {"padded rows, cells and head strides",
       [](TSpec* s) {
         s->cell_pad = 9;
         s->k.row_pad = 16;
         s->v.row_pad = 8;
         s->k.outer_pad = 32;
         s->v.outer_pad = 4;
         s->k.offset = 64;
         s->v.offset = 128;
       }},
      {"padded head-major views",
       [](TSpec* s) {
         s->k.head_major = s->v.head_major = true;
         s->cell_pad = 5;
         s->k.row_pad = 4;
         s->v.row_pad = 12;
         s->v.outer_pad = 16;
       }},
      {"K head-major, V token-major",
       [](TSpec* s) {
         s->k.head_major = true;
         s->mask = Mask::kCausal;
       }},
      {"a 333-row prompt over 400 keys, causal",
       [](TSpec* s) {
         s->rows = 333;
         s->total = 400;
         s->mask = Mask::kCausal;
       }},
  };
  int index = 0;
  for (const Pair& p : kPairs) {
    for (const Feature& f : features) {
      TSpec s = WithPair(p);
      f.set(&s);
      Check(s, Seed() + static_cast<uint64_t>(index++), f.what);
    }
  }
}

// Block-type views may start at any byte and have strides of any bytes (attnrt reads them as
// uint8 pools); float views must start and stride on their elements, else they are declined.
TEST(GgmlFlashAttnExtTwoTypes, ByteOffsetsAndOddStrides) {
  int index = 0;
  for (const Pair& p : kPairs) {
    for (size_t offset : {size_t{1}, size_t{2}, size_t{3}}) {
      for (bool odd_stride : {false, true}) {
        TSpec s = WithPair(p);
        s.mask = Mask::kCausal;
        s.k.offset = offset;
        s.v.offset = offset + 2;
        if (odd_stride) {
          s.k.row_pad = 1;
          s.v.row_pad = 3;
          s.k.stream_pad = s.v.stream_pad = 5;
          s.streams = 2;
        }
        const auto served = [&](ggml_type t, const CacheLayout& l) {
          const size_t es = ggml_is_quantized(t) ? 1 : ggml_type_size(t);
          return l.offset % es == 0 && l.row_pad % es == 0 && l.stream_pad % es == 0;
        };
        const bool expect = served(s.k_type, s.k) && served(s.v_type, s.v);
        Check(s, Seed() + static_cast<uint64_t>(index++),
              "K at byte " + std::to_string(offset) + (odd_stride ? ", odd strides" : ""), expect);
      }
    }
  }
}

// Sparse masks (ggml_flash_attn_ext_set_n_kv_max): each row sees at most n_kv_max keys, the cells
// no row sees hold NaN; with ALiBi and sinks, decode and prompt rows.
TEST(GgmlFlashAttnExtTwoTypes, SparseMasks) {
  int index = 0;
  for (const Pair& p : kPairs) {
    for (int variant = 0; variant < 8; ++variant) {
      TSpec s = WithPair(p);
      s.total = 96;
      s.rows = variant == 1 ? 1 : variant == 5 ? 130 : 7;
      s.streams = variant == 3 ? 2 : 1;
      s.mask_streams = variant == 3 ? 2 : 1;
      s.n_kv_max = 12;
      s.mask = Mask::kFn;
      // Row i sees keys j = i, i + 11, i + 22, ... below 90 (at most 9 of them), cells 90.. none.
      s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t b) {
        return j < 90 && (j + b) % 11 == i % 11 ? static_cast<float>((j * 5 + i) % 7) / 4.0f - 0.5f
                                                : -kInf;
      };
      s.poison_hidden = true;
      if (variant == 2) {
        s.max_bias = 4.0f;
        s.heads = 8;
        s.sinks = true;
      }
      if (variant == 4) {  // one mask for 2 streams, head-major, block views at odd bytes
        s.streams = 2;
        s.k.head_major = s.v.head_major = true;
        if (ggml_is_quantized(p.k)) s.k.offset = 5;
        if (ggml_is_quantized(p.v)) s.v.offset = 3;
      }
      if (variant == 6) s.n_kv_max = 4;  // rows see more keys than n_kv_max: served whole
      if (variant == 7) {  // ALiBi slopes of heads 4-7 underflow to 0: ggml reads every key
        s.max_bias = 300.0f;
        s.heads = 8;
      }
      Check(
          s, Seed() + static_cast<uint64_t>(index++),
          "sparse n_kv_max " + std::to_string(s.n_kv_max) + " variant " + std::to_string(variant));
    }
  }
}

// NaN and +-inf in cells the mask hides from a row: a row that hides a cell is finite (ggml never
// reads it), a row that sees it is as ggml's one-row algorithm makes it. Three sequences in one
// cache: rows 0-2 see cells [0, 15), rows 3-4 cells [20, 40); cells [15, 20) belong to no row here;
// cell 25 is NaN too (seen by rows 3-4).
TEST(GgmlFlashAttnExtTwoTypes, NaNInHiddenAndVisibleCells) {
  int index = 0;
  for (const Pair& p : kPairs) {
    for (bool visible_nan : {false, true}) {
      for (bool head_major : {false, true}) {
        TSpec s = WithPair(p);
        s.poison_value = head_major ? kInf : visible_nan ? -kInf : kNaN;
        s.mask = Mask::kFn;
        s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
          return (i < 3 && j < 15) || (i >= 3 && j >= 20) ? 0.0f : -kInf;
        };
        s.k.head_major = s.v.head_major = head_major;
        s.poison = [=](bool is_v, int64_t j, int64_t, int64_t) {
          return (j >= 15 && j < 20 && (is_v || j % 2 == 0)) || (visible_nan && j == 25 && is_v);
        };
        Check(s, Seed() + static_cast<uint64_t>(index++),
              std::to_string(s.poison_value) + " in hidden cells" +
                  (visible_nan ? " and a visible one" : "") + (head_major ? " head-major" : ""));
      }
    }
  }
}

// Through ggml's scheduler, attnrt listed first (as a host lists an ACCEL device): the node goes
// to attnrt and its output is the float64 reference's.
TEST(GgmlFlashAttnExtTwoTypes, ThroughGgmlsScheduler) {
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  if (be.cpu == nullptr) GTEST_SKIP() << "ggml's CPU backend did not load";
  struct Case {
    ggml_type k, v;
    int64_t d, dv;
  };
  int index = 0;
  for (const Case& c :
       {Case{GGML_TYPE_F16, GGML_TYPE_Q4_0, 128, 128}, Case{GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, 64, 64},
        Case{GGML_TYPE_F16, GGML_TYPE_F32, 65, 67}, Case{GGML_TYPE_BF16, GGML_TYPE_BF16, 67, 67},
        Case{GGML_TYPE_F32, GGML_TYPE_Q8_0, 3, 32}}) {
    TSpec s;
    s.k_type = c.k;
    s.v_type = c.v;
    s.d = c.d;
    s.dv = c.dv;
    s.mask = Mask::kCausal;
    s.rows = 9;
    const uint64_t seed = Seed() + static_cast<uint64_t>(index++);
    SCOPED_TRACE(TypeNames(s) + " (seed " + std::to_string(seed) + ")");
    TNode n;
    Build(s, seed, &n);
    ASSERT_FALSE(HasFatalFailure());
    const Ref want = Reference(n, QRound::kCache);
    ggml_backend_t backends[2] = {be.attnrt, be.cpu};
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, nullptr, 2, 64, false, true);
    ASSERT_TRUE(ggml_backend_sched_alloc_graph(sched, n.graph));
    EXPECT_EQ(ggml_backend_sched_get_tensor_backend(sched, n.out), be.attnrt);
    EXPECT_EQ(ggml_backend_sched_graph_compute(sched, n.graph), GGML_STATUS_SUCCESS);
    std::vector<float> got(static_cast<size_t>(ggml_nelements(n.out)));
    std::memcpy(got.data(), n.out->data, ggml_nbytes(n.out));
    EXPECT_EQ(Mismatches("scheduled " + TypeNames(s), n, got, want.out, nullptr,
                         Tolerance(s.k_type), want.v_max),
              0u);
    ggml_backend_sched_free(sched);
  }
}

// The thread count set between runs: the node computed the same on 1 to 4 threads.
TEST(GgmlFlashAttnExtTwoTypes, ThreadCounts) {
  int index = 0;
  for (const Pair& p :
       {Pair{GGML_TYPE_F16, GGML_TYPE_Q4_0}, Pair{GGML_TYPE_Q8_0, GGML_TYPE_BF16}}) {
    for (int threads : {1, 2, 3, 4}) {
      TSpec s = WithPair(p);
      s.rows = 67;
      s.total = 130;
      s.mask = Mask::kCausal;
      s.streams = 2;
      Check(s, Seed() + static_cast<uint64_t>(index++), std::to_string(threads) + " threads", true,
            false, threads);
    }
  }
}

// n_kv around the largest block (1024): one block, two, and a prime (blocks of one key).
TEST(GgmlFlashAttnExtTwoTypes, LongCaches) {
  int index = 0;
  for (int64_t total : {1024, 1025, 2048, 2053}) {
    for (const Pair& p : {Pair{GGML_TYPE_F16, GGML_TYPE_Q4_0}, Pair{GGML_TYPE_Q8_0, GGML_TYPE_F32},
                          Pair{GGML_TYPE_BF16, GGML_TYPE_BF16}}) {
      TSpec s = WithPair(p);
      s.total = total;
      s.rows = 3;
      s.d = p.k == GGML_TYPE_BF16 ? 67 : 64;
      s.mask = index % 2 == 0 ? Mask::kCausal : Mask::kUniform;
      s.k.head_major = index % 3 == 0;
      Check(s, Seed() + static_cast<uint64_t>(index++), "n_kv " + std::to_string(total));
    }
  }
}

}  // namespace
