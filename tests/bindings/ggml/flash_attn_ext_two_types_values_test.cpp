// libattnrt_ggml.so on two-type and odd-head-size FLASH_ATTN_EXT nodes (see
// flash_attn_ext_two_types_test.cpp): head sizes that are no multiple of 8, value magnitudes,
// V in K's memory, guard pages and the nodes that must stay on the CPU backend.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flash_attn_ext_two_types_harness.h"

namespace {

using namespace fa_two_types;

// Head sizes that are no multiple of 8 for every float type (one type), with the features.
TEST(GgmlFlashAttnExtTwoTypes, OddHeadSizesOfEveryFloatType) {
  int index = 0;
  for (int64_t d : {1, 3, 5, 65, 67, 129, 255, 257}) {
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
      for (int variant = 0; variant < 6; ++variant) {
        TSpec s;
        s.d = d;
        s.k_type = s.v_type = t;
        s.total = 33;
        switch (variant) {
          case 0:
            break;
          case 1:
            s.mask = Mask::kCausal;
            s.k.head_major = s.v.head_major = true;
            s.cell_pad = 3;
            s.k.row_pad = s.v.row_pad = 2 * ggml_type_size(t);
            break;
          case 2:
            s.max_bias = 8.0f;
            s.heads = 8;
            s.sinks = true;
            s.softcap = 20.0f;
            s.mask = Mask::kFn;
            s.mask_fn = fa_harness::Distance(s.rows, s.total, 2.0f);
            break;
          case 3:
            s.rows = 40;
            s.streams = 2;
            s.mask_streams = 2;
            s.mask_heads = 4;
            s.mask = Mask::kScattered;
            break;
          case 4:  // a sparse mask, the cells no row sees NaN
            s.rows = 6;
            s.n_kv_max = 5;
            s.mask = Mask::kFn;
            s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
              return j < 30 && j % 7 == i % 7 ? 0.25f * static_cast<float>(j % 3) : -kInf;
            };
            s.poison_hidden = true;
            break;
          default:  // two sequences, NaN in the cells of neither
            s.mask = Mask::kFn;
            s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
              return (i < 2 && j < 12) || (i >= 2 && j >= 16) ? 0.0f : -kInf;
            };
            s.poison_hidden = true;
        }
        Check(s, Seed() + static_cast<uint64_t>(index++), "variant " + std::to_string(variant));
      }
    }
  }
}

// Head sizes no multiple of 8 with two types, and K and V of other head sizes.
TEST(GgmlFlashAttnExtTwoTypes, OddHeadSizesWithTwoTypes) {
  struct Case {
    ggml_type k, v;
    int64_t d, dv;
  };
  const Case cases[] = {
      {GGML_TYPE_F16, GGML_TYPE_Q8_0, 65, 64},     {GGML_TYPE_F16, GGML_TYPE_Q4_0, 65, 64},
      {GGML_TYPE_BF16, GGML_TYPE_F32, 67, 67},     {GGML_TYPE_F32, GGML_TYPE_F16, 3, 5},
      {GGML_TYPE_F16, GGML_TYPE_BF16, 1, 1},       {GGML_TYPE_Q8_0, GGML_TYPE_F16, 64, 65},
      {GGML_TYPE_Q4_0, GGML_TYPE_BF16, 32, 1},     {GGML_TYPE_Q8_0, GGML_TYPE_F32, 32, 31},
      {GGML_TYPE_Q4_0, GGML_TYPE_F32, 64, 3},      {GGML_TYPE_Q8_0, GGML_TYPE_BF16, 96, 33},
      {GGML_TYPE_F32, GGML_TYPE_Q4_0, 257, 256},   {GGML_TYPE_BF16, GGML_TYPE_Q8_0, 129, 128},
      {GGML_TYPE_F16, GGML_TYPE_F32, 255, 257},    {GGML_TYPE_F16, GGML_TYPE_F16, 65, 67},
      {GGML_TYPE_BF16, GGML_TYPE_BF16, 1, 129},    {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, 32, 96},
      {GGML_TYPE_F16, GGML_TYPE_Q8_0, 192, 128},   {GGML_TYPE_Q4_0, GGML_TYPE_F16, 576, 512},
      {GGML_TYPE_F16, GGML_TYPE_Q4_0, 4096, 4096}, {GGML_TYPE_BF16, GGML_TYPE_F32, 1, 2049},
      {GGML_TYPE_F32, GGML_TYPE_F16, 3001, 7},     {GGML_TYPE_F16, GGML_TYPE_F16, 64, 65},
      {GGML_TYPE_F16, GGML_TYPE_F16, 65, 64},      {GGML_TYPE_F32, GGML_TYPE_F32, 128, 1},
  };
  int index = 0;
  for (const Case& c : cases) {
    for (int variant = 0; variant < 3; ++variant) {
      TSpec s;
      s.k_type = c.k;
      s.v_type = c.v;
      s.d = c.d;
      s.dv = c.dv;
      s.total = 29;
      if (variant == 1) {
        s.mask = Mask::kCausal;
        s.k.head_major = true;
        s.sinks = true;
      } else if (variant == 2) {
        s.rows = 11;
        s.total = 6;
        s.streams = 2;
        s.max_bias = 6.0f;
        s.mask = Mask::kFn;
        s.mask_fn = fa_harness::Distance(s.rows, s.total, 1.0f);
        s.poison_hidden = true;
      }
      Check(s, Seed() + static_cast<uint64_t>(index++), "variant " + std::to_string(variant));
    }
  }
}

// Every tensor ends where an inaccessible page begins (TSpec::guard): no kernel or conversion
// reads or writes past a view's last row, q, the mask or the output, for odd head sizes, two
// types and block types at odd byte offsets.
TEST(GgmlFlashAttnExtTwoTypes, NothingReadOrWrittenPastTheViews) {
  struct Case {
    ggml_type k, v;
    int64_t d, dv;
  };
  const Case cases[] = {
      {GGML_TYPE_F16, GGML_TYPE_F16, 1, 1},       {GGML_TYPE_BF16, GGML_TYPE_BF16, 3, 3},
      {GGML_TYPE_F32, GGML_TYPE_F32, 65, 65},     {GGML_TYPE_F16, GGML_TYPE_F16, 67, 67},
      {GGML_TYPE_BF16, GGML_TYPE_BF16, 257, 257}, {GGML_TYPE_F16, GGML_TYPE_Q4_0, 64, 64},
      {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, 64, 64},   {GGML_TYPE_Q4_0, GGML_TYPE_F16, 32, 33},
      {GGML_TYPE_F16, GGML_TYPE_Q8_0, 65, 64},    {GGML_TYPE_F32, GGML_TYPE_BF16, 5, 3},
      {GGML_TYPE_Q8_0, GGML_TYPE_F32, 32, 1},     {GGML_TYPE_BF16, GGML_TYPE_F16, 129, 127},
  };
  int index = 0;
  for (const Case& c : cases) {
    for (int variant = 0; variant < 4; ++variant) {
      TSpec s;
      s.guard = true;
      s.k_type = c.k;
      s.v_type = c.v;
      s.d = c.d;
      s.dv = c.dv;
      s.total = 23;
      s.rows = 3;
      s.sinks = variant == 2;
      s.mask = variant == 1 ? Mask::kCausal : Mask::kUniform;
      s.k.head_major = s.v.head_major = variant == 1;
      if (variant == 2) {
        s.max_bias = 2.0f;
        s.heads = 8;
        s.mask_heads = 8;
        s.q_permuted = false;
      }
      if (variant == 3) {  // block types at odd bytes, n_q > n_kv, a decode stream of two
        if (ggml_is_quantized(c.k)) s.k.offset = 3;
        if (ggml_is_quantized(c.v)) s.v.offset = 1;
        s.rows = 30;
        s.streams = 2;
        s.mask = Mask::kNone;
      }
      Check(s, Seed() + static_cast<uint64_t>(index++),
            "guarded variant " + std::to_string(variant));
      if (HasFatalFailure()) return;
    }
  }
}

// V's elements of magnitudes a float16 cannot hold with its precision (1e-6: float16 subnormals, a
// spacing of 6e-8) or at all (1e5): ggml's output keeps V's float32 precision.
TEST(GgmlFlashAttnExtTwoTypes, MagnitudesOfV) {
  struct Case {
    ggml_type k, v;
    float magnitude;
  };
  // Held: a V whose values a float16 holds (1e-3), V under a K of a type as wide as V's
  // (bfloat16, float32, block types: float32), and values past float16's range under a float16 K
  // (the output row turns inf and is computed again by ggml's algorithm).
  const Case cases[] = {
      {GGML_TYPE_BF16, GGML_TYPE_F32, 1e-30f}, {GGML_TYPE_BF16, GGML_TYPE_F32, 1e30f},
      {GGML_TYPE_F32, GGML_TYPE_F16, 1e-3f},   {GGML_TYPE_Q8_0, GGML_TYPE_F32, 1e-6f},
      {GGML_TYPE_Q4_0, GGML_TYPE_BF16, 1e20f}, {GGML_TYPE_F16, GGML_TYPE_F32, 1e-3f},
      {GGML_TYPE_F16, GGML_TYPE_F32, 1e5f},    {GGML_TYPE_F16, GGML_TYPE_BF16, 1e5f},
      {GGML_TYPE_F32, GGML_TYPE_BF16, 1e-20f},
  };
  int index = 0;
  for (const Case& c : cases) {
    for (bool causal : {false, true}) {
      TSpec s;
      s.k_type = c.k;
      s.v_type = c.v;
      s.v_magnitude = c.magnitude;
      s.mask = causal ? Mask::kCausal : Mask::kUniform;
      Check(s, Seed() + static_cast<uint64_t>(index++),
            "V elements of magnitude " + std::to_string(c.magnitude) + (causal ? " causal" : ""));
    }
  }
}

// Under a K of float16 and a V of another type the query, bias, sinks and output are float32 (as
// ggml's CPU backend, which accumulates a V that is not F16 in float32, writes them). This test
// found them of K's float16 before: V elements near 1e-6 gave outputs on float16's subnormal grid
// (a spacing of 6e-8), at 1e-9 all 0; NMSE against ggml's CPU backend (seed 1) F32 V 1.9e-3, BF16
// V 2.4e-3, F32 V at 1e-9 1.0, a 1031-key decode row 4.1e-2, Q8_0 V 0.18, Q4_0 V 2.8e-3, where
// llama.cpp's test-backend-ops accepts 5e-4 for FLASH_ATTN_EXT.
TEST(GgmlFlashAttnExtTwoTypes, SmallValuesOfAWiderVUnderAFloat16K) {
  struct Case {
    ggml_type v;
    float magnitude;
    int64_t rows, total;
  };
  const Case cases[] = {
      {GGML_TYPE_F32, 1e-6f, 5, 40},  {GGML_TYPE_BF16, 1e-6f, 5, 40},
      {GGML_TYPE_F32, 1e-9f, 5, 40},  {GGML_TYPE_F32, 1e-6f, 1, 1031},
      {GGML_TYPE_Q8_0, 1e-6f, 5, 40}, {GGML_TYPE_Q4_0, 1e-6f, 5, 40},
  };
  int index = 0;
  for (const Case& c : cases) {
    TSpec s;
    s.k_type = GGML_TYPE_F16;
    s.v_type = c.v;
    s.v_magnitude = c.magnitude;
    s.rows = c.rows;
    s.total = c.total;
    s.mask = Mask::kCausal;
    const uint64_t seed = Seed() + static_cast<uint64_t>(index++);
    const std::string what = "V elements of magnitude " + std::to_string(c.magnitude) + ", n_kv " +
                             std::to_string(c.total);
    Check(s, seed, what);
    EXPECT_LE(NmseAgainstCpu(s, seed), 5e-4) << TypeNames(s) << " " << what;
  }
}

// A sink float16 cannot hold (-1000.3: float16's spacing there is 0.5) over logits near -1000 (a
// mask near -1000): with two types the sinks are float32, as ggml adds them. This test found them
// rounded to K's float16 before (the sink's weight off by exp(0.2), outputs by ~7 %; NMSE against
// ggml's CPU backend 4.0e-3 for F16/Q4_0, 1.6e-3 for F16/F32). Under one F16 type the sinks are
// still of the cache's type (docs/llama-cpp.md, "Precision": NMSE 2.2e-3 on this node, which
// llama.cpp's models, whose sinks are a few units over masks of 0 and -inf, do not make).
TEST(GgmlFlashAttnExtTwoTypes, SinkThatKsFloat16CannotHold) {
  int index = 0;
  for (ggml_type v : {GGML_TYPE_Q4_0, GGML_TYPE_F32}) {
    TSpec s;
    s.k_type = GGML_TYPE_F16;
    s.v_type = v;
    s.sinks = true;
    s.sink_values = {-1000.3f, -1000.3f, -999.8f, -1001.2f};
    s.total = 3;  // a few keys: the sink carries a good part of each row's weight
    s.rows = 2;
    s.mask = Mask::kFn;
    s.mask_fn = [](int64_t j, int64_t i, int64_t, int64_t) {
      return -1000.0f - 0.5f * static_cast<float>((j * 7 + i * 3) % 6);
    };
    const uint64_t seed = Seed() + static_cast<uint64_t>(index++);
    Check(s, seed, "sinks near -1000.3 over a mask near -1000");
    EXPECT_LE(NmseAgainstCpu(s, seed), 5e-4) << TypeNames(s);
  }
}

// V in K's memory: the leading Dv elements of K's rows (one type: MLA's latent cache, odd sizes
// included), or K's bytes read as another type (two types: not expressible as a ggml view, made
// by placing V's cache at K's address); served and right, or declined.
TEST(GgmlFlashAttnExtTwoTypes, VInKsMemory) {
  struct Case {
    ggml_type k, v;
    int64_t d, dv;
    VMemory memory;
    bool expect;
  };
  const Case cases[] = {
      {GGML_TYPE_F16, GGML_TYPE_F16, 65, 33, VMemory::kLeadingOfK, true},
      {GGML_TYPE_BF16, GGML_TYPE_BF16, 67, 67, VMemory::kLeadingOfK, true},
      {GGML_TYPE_F32, GGML_TYPE_F32, 3, 1, VMemory::kLeadingOfK, true},
      {GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, 96, 64, VMemory::kLeadingOfK, true},
      {GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, 576, 512, VMemory::kLeadingOfK, true},
      {GGML_TYPE_F32, GGML_TYPE_F16, 64, 64, VMemory::kAliasOfK, false},
      {GGML_TYPE_F16, GGML_TYPE_Q8_0, 64, 64, VMemory::kAliasOfK, false},
      {GGML_TYPE_BF16, GGML_TYPE_F16, 65, 65, VMemory::kAliasOfK, false},
  };
  int index = 0;
  for (const Case& c : cases) {
    for (bool causal : {false, true}) {
      TSpec s;
      s.k_type = c.k;
      s.v_type = c.v;
      s.d = c.d;
      s.dv = c.dv;
      s.v_memory = c.memory;
      s.mask = causal ? Mask::kCausal : Mask::kUniform;
      // K's bytes read as F16 make values up to 65504, which ggml's CPU backend sums in float16
      // (to inf): it is not held to the reference there.
      Check(s, Seed() + static_cast<uint64_t>(index++),
            c.memory == VMemory::kLeadingOfK ? "V the leading part of K's rows"
                                             : "V's cache at K's address",
            c.expect, /*check_cpu=*/c.memory == VMemory::kLeadingOfK);
    }
  }
}

// Nodes attnrt cannot serve are declined: ggml's other block types for K or V, a Q4_0 view whose
// head size is no multiple of 32 (its row size rounds down to whole blocks), V with other kv
// heads than K, a sparse mask with a slice per head.
TEST(GgmlFlashAttnExtTwoTypes, DeclinedNodes) {
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  struct Case {
    const char* what;
    ggml_type k, v;
    int64_t d, dv, v_heads;
    int32_t n_kv_max;
    int64_t mask_heads;
  };
  const Case cases[] = {
      {"K Q4_1", GGML_TYPE_Q4_1, GGML_TYPE_F16, 64, 64, 2, 0, 1},
      {"V Q4_1", GGML_TYPE_F16, GGML_TYPE_Q4_1, 64, 64, 2, 0, 1},
      {"V Q5_0", GGML_TYPE_Q8_0, GGML_TYPE_Q5_0, 64, 64, 2, 0, 1},
      {"V IQ4_NL", GGML_TYPE_BF16, GGML_TYPE_IQ4_NL, 64, 64, 2, 0, 1},
      {"V Q4_0 of 33 elements", GGML_TYPE_F16, GGML_TYPE_Q4_0, 64, 33, 2, 0, 1},
      {"V Q4_0 of 65 elements", GGML_TYPE_F16, GGML_TYPE_Q4_0, 65, 65, 2, 0, 1},
      {"K Q4_0 of 33 elements", GGML_TYPE_Q4_0, GGML_TYPE_F16, 33, 33, 2, 0, 1},
      {"K and V Q4_0 of 65 elements", GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, 65, 65, 2, 0, 1},
      {"V Q8_0 of 48 elements", GGML_TYPE_F32, GGML_TYPE_Q8_0, 48, 48, 2, 0, 1},
      {"V with one kv head, K two", GGML_TYPE_F16, GGML_TYPE_Q8_0, 64, 64, 1, 0, 1},
      {"sparse mask per head", GGML_TYPE_F16, GGML_TYPE_Q4_0, 64, 64, 2, 4, 4},
      {"head size 0", GGML_TYPE_F16, GGML_TYPE_F32, 0, 0, 2, 0, 1},
      {"V head size 0", GGML_TYPE_BF16, GGML_TYPE_F16, 8, 0, 2, 0, 1},
  };
  for (const Case& c : cases) {
    ggml_init_params params = {ggml_tensor_overhead() * 8, nullptr, true};
    ggml_context* ctx = ggml_init(params);
    const int64_t blk_k = ggml_blck_size(c.k), blk_v = ggml_blck_size(c.v);
    ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, c.d, 3, 4, 1);
    ggml_tensor* kc = ggml_new_tensor_1d(ctx, c.k, blk_k * 4096);
    ggml_tensor* vc = ggml_new_tensor_1d(ctx, c.v, blk_v * 4096);
    const size_t krow = ggml_type_size(c.k) * static_cast<size_t>((c.d + blk_k - 1) / blk_k);
    const size_t vrow = ggml_type_size(c.v) * static_cast<size_t>((c.dv + blk_v - 1) / blk_v);
    ggml_tensor* k = ggml_view_4d(ctx, kc, c.d, 20, 2, 1, krow, krow * 20, krow * 40, 0);
    ggml_tensor* v =
        ggml_view_4d(ctx, vc, c.dv, 20, c.v_heads, 1, vrow, vrow * 20, vrow * 20 * c.v_heads, 0);
    ggml_tensor* mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, 20, 3, c.mask_heads, 1);
    ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, 0.125f, 0, 0);
    if (c.n_kv_max > 0) ggml_flash_attn_ext_set_n_kv_max(out, c.n_kv_max);
    EXPECT_FALSE(ggml_backend_supports_op(be.attnrt, out)) << c.what;
    ggml_free(ctx);
  }
}

}  // namespace
