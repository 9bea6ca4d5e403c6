// FLASH_ATTN_EXT over ggml's Q8_0 and Q4_0 K/V caches (docs/llama-cpp.md): the caches are
// quantized by ggml's own quantizer (ggml_quantize_chunk), and every element of a claimed node's
// output is checked against a float64 reference of ggml's definition of the op (ggml.h,
// ggml_flash_attn_ext; ggml_compute_forward_flash_attn_ext_f16_one_chunk) computed on the K/V that
// ggml's to_float dequantizes and on the float32 query (attnrt keeps q in float32 for these
// caches), within float32 accumulation: 1e-4 of max |V|. Rows whose output ggml's algorithm
// computes (non-finite values in cells the mask hides) are held to the same reference with q
// rounded through Q8_0 as ggml's CPU backend rounds it. ggml's CPU backend is held to that
// Q8_0-query reference too, which checks the reference itself. Memory the views do not cover holds
// finite garbage blocks (scales up to ~250), so a misread block moves the output without making it
// NaN (a NaN row would be computed again and hide it).
#include <gtest/gtest.h>

#include "flash_attn_ext_quant_harness.h"

namespace {

using namespace fa_quant;

TEST(GgmlFlashAttnExtQuant, HeadSizesAndGroupedQueryRatios) {
  for (ggml_type type : kTypes) {
    for (int64_t d : {32, 64, 128, 256}) {
      for (int64_t kv_heads : {1, 2, 4}) {
        QSpec s;
        s.k_type = s.v_type = type;
        s.head_size = d;
        s.heads = 4;
        s.kv_heads = kv_heads;
        s.rows = 3;
        s.total = 37;
        Check(s, fa_harness::Seed() + static_cast<uint64_t>(d * 7 + kv_heads),
              Name(type) + " D " + std::to_string(d) + " Hkv " + std::to_string(kv_heads));
      }
    }
  }
}

TEST(GgmlFlashAttnExtQuant, KvLengthsAndQueryRows) {
  struct Case {
    int64_t total, rows;
  };
  for (ggml_type type : kTypes) {
    for (const Case c : {Case{1, 1}, Case{1, 3}, Case{7, 1}, Case{7, 7}, Case{33, 5}, Case{33, 40},
                         Case{4, 9}, Case{1031, 2}, Case{1031, 1}}) {
      QSpec s;
      s.k_type = s.v_type = type;
      s.total = c.total;
      s.rows = c.rows;
      Check(s, fa_harness::Seed() + static_cast<uint64_t>(c.total * 3 + c.rows),
            Name(type) + " n_kv " + std::to_string(c.total) + " n_q " + std::to_string(c.rows));
    }
  }
}

TEST(GgmlFlashAttnExtQuant, PaddedWindowedAndHeadMajorViews) {
  struct Case {
    bool head_major;
    size_t head_pad, token_pad, offset;
    int64_t window;
    size_t stream_pad;
    int64_t streams;
  };
  int id = 0;
  for (ggml_type type : kTypes) {
    for (const Case c : {Case{false, 0, 0, 0, 0, 0, 2}, Case{false, 34, 0, 0, 3, 0, 1},
                         Case{false, 5, 3, 1, 2, 7, 2}, Case{false, 0, 1, 17, 5, 0, 3},
                         Case{true, 0, 0, 0, 0, 0, 1}, Case{true, 18, 9, 3, 4, 11, 2},
                         Case{true, 1, 0, 33, 1, 0, 3}}) {
      QSpec s;
      s.k_type = s.v_type = type;
      s.head_major = c.head_major;
      s.head_pad = c.head_pad;
      s.token_pad = c.token_pad;
      s.offset = c.offset;
      s.window = c.window;
      s.stream_pad = c.stream_pad;
      s.streams = c.streams;
      s.total = 29;
      s.rows = 4;
      s.heads = 6;
      s.kv_heads = 3;
      ++id;
      Check(s, fa_harness::Seed() + static_cast<uint64_t>(id),
            Name(type) + (c.head_major ? " head-major" : " token-major") + " case " +
                std::to_string(id));
    }
  }
}

TEST(GgmlFlashAttnExtQuant, VIsAViewOfK) {
  int id = 0;
  for (ggml_type type : kTypes) {
    for (VSource v : {VSource::kSameAsK, VSource::kOtherHalfOfK}) {
      for (bool head_major : {false, true}) {
        QSpec s;
        s.k_type = s.v_type = type;
        s.v_source = v;
        s.head_major = head_major;
        s.streams = 2;
        s.offset = 3;
        s.total = 21;
        Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id),
              Name(type) + (v == VSource::kSameAsK ? " V = K" : " V the other half of K") +
                  (head_major ? " head-major" : " token-major"));
      }
    }
  }
}

TEST(GgmlFlashAttnExtQuant, MasksAlibiSoftcapAndSinks) {
  int id = 0;
  for (ggml_type type : kTypes) {
    auto base = [&] {
      QSpec s;
      s.k_type = s.v_type = type;
      s.total = 45;
      s.rows = 6;
      s.heads = 8;
      s.kv_heads = 2;
      s.streams = 2;
      return s;
    };
    QSpec s = base();
    s.mask = MaskKind::kNone;
    Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id), Name(type) + " no mask");
    s = base();
    s.mask = MaskKind::kCausal;
    const uint64_t causal_before = Shared().CausalCalls();
    Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id), Name(type) + " causal mask");
    EXPECT_GT(Shared().CausalCalls(), causal_before) << "a causal mask takes the causal path";
    s = base();
    s.mask = MaskKind::kScattered;
    s.mask_heads = 8;
    s.mask_streams = 2;
    Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id),
          Name(type) + " scattered mask per head and stream");
    s = base();
    s.mask = MaskKind::kFn;
    s.mask_fn = fa_harness::Distance(s.rows, s.total, 3.0f);
    s.max_bias = 8.0f;
    Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id), Name(type) + " ALiBi");
    s = base();
    s.heads = 6;  // ALiBi over a head count that is not a power of two
    s.mask = MaskKind::kFn;
    s.mask_fn = fa_harness::Distance(s.rows, s.total, 1.0f);
    s.max_bias = 3.0f;
    s.sinks = true;
    Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id),
          Name(type) + " ALiBi, 6 heads, sinks");
    for (float c : {20.0f, -20.0f, 0.5f}) {
      s = base();
      s.softcap = c;
      s.scale = 0.4f;
      Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id),
            Name(type) + " softcap " + std::to_string(c));
    }
    s = base();
    s.sinks = true;
    s.mask = MaskKind::kCausal;
    Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id), Name(type) + " sinks, causal");
    s = base();
    s.mask = MaskKind::kFn;  // large finite values: float32 keeps them
    s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
      return j % 9 == 4 ? -kInf : -2000.0f + static_cast<float>((j * 7 + i) % 11);
    };
    Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id), Name(type) + " mask near -2000");
  }
}

// Rows whose every key is hidden: 0 as ggml gives (sum 0), or the sink's 0.
TEST(GgmlFlashAttnExtQuant, FullyMaskedRows) {
  for (ggml_type type : kTypes) {
    for (bool sinks : {false, true}) {
      QSpec s;
      s.k_type = s.v_type = type;
      s.total = 19;
      s.rows = 4;
      s.sinks = sinks;
      s.mask = MaskKind::kFn;
      s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
        return i == 1 || (i == 2 && j != 7) ? -kInf : 0.25f;
      };
      Check(s, fa_harness::Seed(), Name(type) + (sinks ? " sinks" : ""), true,
            /*count_rows=*/false);
    }
  }
}

// A float16 scale that is NaN or Inf in a block of a cell the mask hides: ggml never reads it, so
// the output is ggml's (the row computed again by ggml's algorithm where attnrt's is non-finite).
TEST(GgmlFlashAttnExtQuant, NonFiniteBlocksInHiddenCells) {
  int id = 0;
  for (ggml_type type : kTypes) {
    for (uint16_t bits : {uint16_t{0x7E00}, uint16_t{0x7C00}, uint16_t{0xFC00}}) {
      for (bool in_v : {false, true}) {
        for (bool causal : {false, true}) {
          QSpec s;
          s.k_type = s.v_type = type;
          s.total = 40;
          s.rows = causal ? 5 : 3;
          s.heads = 4;
          s.kv_heads = 2;
          s.streams = 2;
          s.mask = MaskKind::kFn;
          const int64_t past = s.total - s.rows;
          // Cells j % 6 == 1 before the diagonal are hidden from every row (another sequence's
          // cells); causal or not past the diagonal.
          s.mask_fn = [=](int64_t j, int64_t i, int64_t, int64_t) {
            if (j < past && j % 6 == 1) return -kInf;
            if (causal && j > past + i) return -kInf;
            return static_cast<float>((j * 5 + i) % 7) / 7.0f - 0.5f;
          };
          // One block of such a cell in kv head 0 of stream 1 gets the scale.
          s.edit_row = [=](bool is_v, int64_t j, int64_t g, int64_t b, uint8_t* row, size_t) {
            if (is_v != in_v || g != 0 || b != 1 || j >= past || j % 6 != 1) return;
            uint8_t* block = row + (j % 2) * ggml_type_size(type);
            block[0] = static_cast<uint8_t>(bits & 0xFF);
            block[1] = static_cast<uint8_t>(bits >> 8);
          };
          const uint64_t causal_before = Shared().CausalCalls();
          Check(s, fa_harness::Seed() + static_cast<uint64_t>(++id),
                Name(type) + (in_v ? " V" : " K") + " scale bits " + std::to_string(bits) +
                    (causal ? " causal" : " not causal"));
          if (causal) {
            EXPECT_GT(Shared().CausalCalls(), causal_before);
          }
        }
      }
    }
  }
}

// A NaN scale in a cell the mask admits reaches the output as in ggml: NaN.
TEST(GgmlFlashAttnExtQuant, NonFiniteBlockInAVisibleCell) {
  for (ggml_type type : kTypes) {
    QSpec s;
    s.k_type = s.v_type = type;
    s.total = 12;
    s.rows = 2;
    s.mask = MaskKind::kNone;
    s.edit_row = [](bool is_v, int64_t j, int64_t g, int64_t b, uint8_t* row, size_t) {
      if (!is_v && j == 5 && g == 1 && b == 0) {
        row[0] = 0x00;
        row[1] = 0x7E;
      }
    };
    QNode n;
    Build(s, fa_harness::Seed(), &n);
    ASSERT_TRUE(ggml_backend_supports_op(Shared().attnrt, n.out));
    std::vector<float> got;
    ASSERT_EQ(RunNode(Shared().attnrt, n, &got), GGML_STATUS_SUCCESS);
    const int64_t D = s.head_size, H = s.heads;
    for (int64_t i = 0; i < s.rows; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const float x = got[static_cast<size_t>((i * H + h) * D + d)];
          EXPECT_EQ(std::isnan(x), h / (H / s.kv_heads) == 1)
              << Name(type) << " row " << i << " head " << h << " element " << d << ": " << x;
        }
  }
}

// K and V of two types (llama.cpp's -ctk/-ctv): attnrt's independent K/V cache types, each pool
// read as its own type; the scheduler gives the node to attnrt.
TEST(GgmlFlashAttnExtQuant, KAndVOfTwoTypes) {
  struct Case {
    ggml_type k, v;
  };
  for (const Case c : {Case{GGML_TYPE_Q8_0, GGML_TYPE_Q4_0}, Case{GGML_TYPE_Q4_0, GGML_TYPE_Q8_0},
                       Case{GGML_TYPE_Q8_0, GGML_TYPE_F16}, Case{GGML_TYPE_Q4_0, GGML_TYPE_F32},
                       Case{GGML_TYPE_Q8_0, GGML_TYPE_BF16}}) {
    for (int64_t kv_heads : {1, 2}) {
      QSpec s;
      s.k_type = c.k;
      s.v_type = c.v;
      s.kv_heads = kv_heads;
      s.rows = 4;
      s.total = 45;
      s.mask = MaskKind::kCausal;
      const std::string what = Name(c.k) + "/" + Name(c.v) + " Hkv " + std::to_string(kv_heads);
      // ggml's CPU backend accumulates P·V in float16 for an F16 V (ggml_vec_mad_f16), farther
      // from the float64 reference than its check allows: attnrt is held to it, ggml is not.
      Check(s, fa_harness::Seed() + static_cast<uint64_t>(c.k * 31 + c.v + kv_heads), what,
            /*check_cpu=*/c.v != GGML_TYPE_F16);
      EXPECT_EQ(Scheduled(s), Shared().attnrt) << what;
    }
  }
}

// Nodes attnrt must decline stay on ggml's CPU backend when ggml's scheduler places them.
TEST(GgmlFlashAttnExtQuant, DeclinedNodesStayOnTheCpuBackend) {
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  QSpec ok;
  EXPECT_EQ(Scheduled(ok), be.attnrt) << "a Q8_0 node of head size 64 (the scheduler's control)";
  struct Case {
    ggml_type k, v;
    int64_t head_size;
  };
  for (const Case c :
       {Case{GGML_TYPE_Q8_0, GGML_TYPE_Q4_1, 64}, Case{GGML_TYPE_Q4_1, GGML_TYPE_F16, 64},
        Case{GGML_TYPE_Q4_1, GGML_TYPE_Q4_1, 64}, Case{GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, 48},
        Case{GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, 48}, Case{GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, 80},
        Case{GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, 80}, Case{GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, 16}}) {
    QSpec s;
    s.k_type = c.k;
    s.v_type = c.v;
    s.head_size = c.head_size;
    const std::string what = std::string(ggml_type_name(c.k)) + "/" + ggml_type_name(c.v) + " D " +
                             std::to_string(c.head_size);
    QNode n;
    Build(s, 1, &n, /*allocate=*/false);
    EXPECT_FALSE(ggml_backend_supports_op(be.attnrt, n.out)) << what;
    EXPECT_EQ(Scheduled(s), be.cpu) << what;
  }
}

}  // namespace
