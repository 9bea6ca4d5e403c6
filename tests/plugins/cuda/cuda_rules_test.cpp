// Host-side logic of the CUDA plugins, without a GPU: eligibility (ONNX Runtime's GQA operator
// documentation, §4, §6.3, §6.5, §7 there), per-batch lengths (its phases and present rules),
// split-KV planning, launch shapes and workspace layout. Expected values are written from the
// documents, never taken from the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/test_support.h"
#include "gqa_cuda_plan.h"
#include "gqa_cuda_rules.h"
#include "gqa_softmax_end.h"

namespace attnrt::cuda {
namespace {

constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kFp8 = ATTNRT_DTYPE_FLOAT8_E4M3FN;

DeviceCaps H200() {
  DeviceCaps caps;
  caps.present = true;
  caps.compute_major = 9;
  caps.compute_minor = 0;
  caps.sm_count = 132;
  caps.max_smem_optin = 232448;
  return caps;
}

DeviceCaps A100() {
  DeviceCaps caps = H200();
  caps.compute_major = 8;
  caps.sm_count = 108;
  caps.max_smem_optin = 166912;
  return caps;
}

// Decode over a shared 4096-row buffer: N=32, Nkv=8, H=128, float16 (a Llama-3-8B layer).
attnrt_gqa_problem Decode() {
  attnrt_gqa_problem p{};
  p.struct_size = sizeof(p);
  attnrt_gqa_attributes_init(&p.attributes);
  p.attributes.num_heads = 32;
  p.attributes.kv_num_heads = 8;
  p.batch_size = 4;
  p.sequence_length = 1;
  p.kv_sequence_length = 1;
  p.num_heads = 32;
  p.kv_num_heads = 8;
  p.head_size = 128;
  p.past_sequence_length = 4096;
  p.present_sequence_length = 4096;
  p.query_dtype = kF16;
  p.cache_dtype = kF16;
  p.device_type = ATTNRT_DEVICE_CUDA;
  p.has_past = true;
  p.has_present = true;
  return p;
}

attnrt_gqa_problem Prefill() {
  attnrt_gqa_problem p = Decode();
  p.sequence_length = 512;
  p.kv_sequence_length = 512;
  p.has_past = false;
  p.past_sequence_length = 0;
  p.present_sequence_length = 512;
  return p;
}

attnrt_gqa_problem Quantized(attnrt_dtype cache) {
  attnrt_gqa_problem p = Decode();
  p.attributes.k_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
  p.attributes.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
  p.attributes.kv_cache_bit_width = 8;
  p.cache_dtype = cache;
  p.k_scale_count = 1;
  p.v_scale_count = 1;
  return p;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CudaRules, PrioritiesFollowTheDocumentedOrder) {
  // ORT's dispatch: XQA → cuDNN SDPA → Flash → MEA → Unfused; all above no CPU rule
  // (device-scoped).
  EXPECT_GT(kXqaPriority, kFlashDecodePriority);
  EXPECT_GT(kFlashDecodePriority, kFlashPriority);
  EXPECT_GT(kFlashPriority, kUnfusedPriority);
}

TEST(CudaRules, DecodeOnSharedBufferGoesToEveryKernel) {
  const attnrt_gqa_problem p = Decode();
  EXPECT_EQ(XqaDeclineReason(p, H200()), "");
  EXPECT_EQ(FlashDecodeDeclineReason(p, H200()), "");
  EXPECT_EQ(FlashDeclineReason(p, H200()), "");
  EXPECT_EQ(UnfusedDeclineReason(p, H200()), "");
  attnrt_gqa_problem bf = p;
  bf.query_dtype = bf.cache_dtype = kBF16;
  EXPECT_EQ(XqaDeclineReason(bf, A100()), "");
}

TEST(CudaRules, CommonReasons) {
  attnrt_gqa_problem p = Decode();
  DeviceCaps none;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, none), "no CUDA device"));
  DeviceCaps old = H200();
  old.compute_major = 7;
  EXPECT_TRUE(Contains(UnfusedDeclineReason(p, old), "below 8.0"));
  attnrt_gqa_problem cpu = p;
  cpu.device_type = ATTNRT_DEVICE_CPU;
  EXPECT_TRUE(Contains(FlashDeclineReason(cpu, H200()), "not on a CUDA device"));
  attnrt_gqa_problem f32 = p;
  f32.query_dtype = f32.cache_dtype = kF32;
  EXPECT_TRUE(Contains(UnfusedDeclineReason(f32, H200()), "float16 or bfloat16"));
  attnrt_gqa_problem qk = p;
  qk.has_output_qk = true;
  qk.attributes.qk_output = 1;
  EXPECT_TRUE(Contains(UnfusedDeclineReason(qk, H200()), "qk_output"));
  attnrt_gqa_problem ring = p;
  ring.attributes.sliding_window_cache = 1;
  ring.attributes.local_window_size = 128;
  EXPECT_TRUE(Contains(FlashDeclineReason(ring, H200()), "sliding_window_cache"));
  attnrt_gqa_problem small = p;
  small.struct_size = sizeof(small) - 8;
  EXPECT_TRUE(Contains(XqaDeclineReason(small, H200()), "struct_size"));
}

TEST(CudaRules, XqaConditionsOfSeed004Section7) {
  attnrt_gqa_problem p = Prefill();
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "sequence_length 512 != 1"));
  p = Decode();
  p.kv_sequence_length = 0;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "kv_sequence_length == 0"));
  p = Decode();
  p.present_sequence_length = 4097;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "share one buffer"));
  p = Decode();
  p.has_past = false;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "no past"));
  p = Decode();
  p.attributes.softcap = 30.0f;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "softcap"));
  p = Decode();
  p.attributes.smooth_softmax = 1;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "without head_sink"));
  p.has_head_sink = true;
  EXPECT_EQ(XqaDeclineReason(p, H200()), "");
  p = Decode();
  p.attributes.local_window_size = 1024;
  EXPECT_EQ(XqaDeclineReason(p, H200()), "");
  for (int64_t h : {32, 80, 96, 192, 512}) {
    p = Decode();
    p.head_size = h;
    EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "head_size " + std::to_string(h)));
  }
  p = Decode();
  p.has_attention_bias = true;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "attention_bias"));
}

TEST(CudaRules, XqaGroupSizes) {
  // Non-quantized: 1..32; quantized: {4, 8, 16, 32} (ONNX Runtime's XQA).
  for (int64_t g = 1; g <= 40; ++g) {
    EXPECT_EQ(XqaGroupSupported(g, false), g <= 32) << g;
    EXPECT_EQ(XqaGroupSupported(g, true), g == 4 || g == 8 || g == 16 || g == 32) << g;
  }
  attnrt_gqa_problem p = Quantized(kI8);
  p.num_heads = p.attributes.num_heads = 24;  // G = 3
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "not one of 4, 8, 16, 32"));
  p = Decode();
  p.num_heads = p.attributes.num_heads = 24;
  EXPECT_EQ(XqaDeclineReason(p, H200()), "");
  p.num_heads = p.attributes.num_heads = 8 * 33;
  EXPECT_TRUE(Contains(XqaDeclineReason(p, H200()), "not in [1, 32]"));
}

TEST(CudaRules, XqaQuantizedCaches) {
  EXPECT_EQ(XqaDeclineReason(Quantized(kI8), A100()), "");
  EXPECT_EQ(XqaDeclineReason(Quantized(kFp8), H200()), "");
  // FP8 needs SM 8.9+ (ONNX Runtime's XQA).
  EXPECT_TRUE(Contains(XqaDeclineReason(Quantized(kFp8), A100()), "8.9"));
  attnrt_gqa_problem int4 = Quantized(kU8);
  int4.attributes.kv_cache_bit_width = 4;
  EXPECT_TRUE(Contains(XqaDeclineReason(int4, H200()), "int4"));
  attnrt_gqa_problem channel = Quantized(kI8);
  channel.attributes.k_quant_type = channel.attributes.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
  EXPECT_TRUE(Contains(XqaDeclineReason(channel, H200()), "PER_TENSOR"));
  attnrt_gqa_problem sink = Quantized(kI8);
  sink.has_head_sink = true;
  EXPECT_TRUE(Contains(XqaDeclineReason(sink, H200()), "head_sink with a quantized"));
  // The other CUDA kernels read non-quantized caches only, and say where quantized ones go.
  EXPECT_TRUE(Contains(FlashDeclineReason(Quantized(kI8), H200()), "cuda_xqa"));
  EXPECT_TRUE(Contains(FlashDecodeDeclineReason(Quantized(kI8), H200()), "quantized"));
  EXPECT_TRUE(Contains(UnfusedDeclineReason(Quantized(kFp8), H200()), "quantized"));
}

TEST(CudaRules, FlashAndUnfused) {
  attnrt_gqa_problem p = Prefill();
  p.attributes.softcap = 50.0f;
  p.attributes.local_window_size = 4096;
  p.attributes.do_rotary = 1;
  p.has_attention_bias = true;
  p.has_head_sink = true;
  p.packed_qkv = true;
  EXPECT_EQ(FlashDeclineReason(p, H200()), "");
  EXPECT_TRUE(Contains(FlashDecodeDeclineReason(p, H200()), "sequence_length 512 != 1"));
  attnrt_gqa_problem odd = Prefill();
  odd.head_size = 96;
  EXPECT_TRUE(Contains(FlashDeclineReason(odd, H200()), "head_size 96"));
  EXPECT_EQ(UnfusedDeclineReason(odd, H200()), "");  // any head size
  odd.head_size = 512;
  EXPECT_EQ(UnfusedDeclineReason(odd, H200()), "");
  attnrt_gqa_problem separate = Decode();
  separate.present_sequence_length = 4097;
  EXPECT_TRUE(Contains(FlashDecodeDeclineReason(separate, H200()), "share one buffer"));
  EXPECT_EQ(FlashDeclineReason(separate, H200()), "");
}

TEST(CudaPlan, BatchInfoFollowsSection31) {
  attnrt_gqa_problem p = Decode();
  p.batch_size = 3;
  // Decode: T_b = seqlens_k + 1, offset T_b - 1 (S = 1), rows T_b, copy the offset rows.
  const std::vector<int32_t> seqlens = {0, 99, 4095};
  auto info = BuildBatchInfo(p, seqlens.data(), 4096);
  ASSERT_EQ(info.size(), 3u);
  EXPECT_EQ(info[0].offset, 0);
  EXPECT_EQ(info[0].rows, 1);
  EXPECT_EQ(info[1].offset, 99);
  EXPECT_EQ(info[1].rows, 100);
  EXPECT_EQ(info[1].copy_rows, 99);
  EXPECT_EQ(info[1].rope_base, 99);
  EXPECT_EQ(info[2].rows, 4096);
  // First prompt with right padding (S = T = 6, T_b = 4): offset 0, only T_b rows are keys.
  attnrt_gqa_problem prompt = Prefill();
  prompt.batch_size = 1;
  prompt.sequence_length = prompt.kv_sequence_length = 6;
  const int32_t padded = 3;
  info = BuildBatchInfo(prompt, &padded, 6);
  EXPECT_EQ(info[0].offset, 0);
  EXPECT_EQ(info[0].rows, 4);
  EXPECT_EQ(info[0].copy_rows, 0);
  // Subsequent prompt without a past (B=1, S=3, T=5): offset 0 and only the 3 new rows exist.
  prompt.sequence_length = prompt.kv_sequence_length = 3;
  const int32_t five = 4;
  info = BuildBatchInfo(prompt, &five, 5);
  EXPECT_EQ(info[0].offset, 0);
  EXPECT_EQ(info[0].rows, 3);
  EXPECT_EQ(info[0].rope_base, 2);
  // Shared KV (L = 0): every T_b row comes from the past.
  attnrt_gqa_problem shared = Decode();
  shared.batch_size = 1;
  shared.kv_sequence_length = 0;
  const int32_t t = 41;
  info = BuildBatchInfo(shared, &t, 4096);
  EXPECT_EQ(info[0].rows, 42);
  EXPECT_EQ(info[0].copy_rows, 42);
  EXPECT_EQ(info[0].offset, 41);
}

// KeyWindow against ONNX Runtime's causal and window rule written out per key: key j is visible
// to row s when j < T_b-rows, j <= P_b + s (causal) and j > P_b + s - W within the causal end.
TEST(CudaPlan, KeyWindowMatchesTheMaskRule) {
  std::mt19937_64 rng(attnrt_test::TestSeed());
  SCOPED_TRACE(attnrt_test::SeedTrace());
  for (int trial = 0; trial < 3000; ++trial) {
    AttentionParams p;
    p.causal = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    const int w = std::uniform_int_distribution<int>(-1, 40)(rng);
    p.local_window_size = p.causal ? w : -1;
    BatchInfo bi{};
    bi.rows = std::uniform_int_distribution<int>(1, 100)(rng);
    bi.offset = std::uniform_int_distribution<int>(0, bi.rows)(rng);
    const int s = std::uniform_int_distribution<int>(0, 60)(rng);
    int lo = 0, hi = 0;
    KeyWindow(p, bi, s, &lo, &hi);
    // The visible keys, one by one: the causal end is min(position + 1, rows) (a padded row past
    // the last key sees every key), then the last W of them.
    const int end = p.causal ? std::min(bi.offset + s + 1, bi.rows) : bi.rows;
    for (int j = 0; j < bi.rows + 2; ++j) {
      const bool visible = j < end && (p.local_window_size < 0 || j >= end - p.local_window_size);
      ASSERT_EQ(visible, j >= lo && j < hi)
          << "j=" << j << " s=" << s << " offset=" << bi.offset << " rows=" << bi.rows
          << " W=" << p.local_window_size << " causal=" << p.causal;
    }
  }
  // W = 0: an empty window (all-zero output row).
  AttentionParams p;
  p.local_window_size = 0;
  BatchInfo bi{};
  bi.rows = 10;
  bi.offset = 5;
  int lo = 0, hi = 0;
  KeyWindow(p, bi, 2, &lo, &hi);
  EXPECT_EQ(lo, hi);
}

TEST(CudaPlan, CacheCapacity) {
  attnrt_gqa_problem p = Decode();
  EXPECT_EQ(CacheCapacity(p), 4096);
  p.has_present = false;
  EXPECT_EQ(CacheCapacity(p), 4097);  // P + L scratch rows
  attnrt_gqa_problem q = Prefill();
  q.has_present = false;
  EXPECT_EQ(CacheCapacity(q), 512);
}

TEST(CudaPlan, SplitsCoverEveryKeyAndFillTheDevice) {
  std::mt19937_64 rng(attnrt_test::TestSeed());
  SCOPED_TRACE(attnrt_test::SeedTrace());
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t blocks = std::uniform_int_distribution<int64_t>(1, 4096)(rng);
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, 300000)(rng);
    const int32_t sms = std::uniform_int_distribution<int32_t>(1, 160)(rng);
    const int32_t max_splits = MaxSplits(rows);
    const SplitPlan plan = PlanSplits(blocks, rows, sms, max_splits);
    SCOPED_TRACE(std::to_string(blocks) + " blocks, " + std::to_string(rows) + " rows, " +
                 std::to_string(sms) + " SMs");
    ASSERT_GE(plan.num_splits, 1);
    ASSERT_LE(plan.num_splits, max_splits);
    ASSERT_LE(plan.num_splits, kMaxSplits);
    // Every key is in exactly one split and no split is empty.
    ASSERT_GE(int64_t{plan.num_splits} * plan.keys_per_split, rows);
    ASSERT_LT(int64_t{plan.num_splits - 1} * plan.keys_per_split, rows);
    // Never below the minimum split length, unless unsplit.
    if (plan.num_splits > 1) {
      ASSERT_GE(plan.keys_per_split, kMinKeysPerSplit);
    }
    // Enough blocks for two per SM whenever the keys allow it.
    const int64_t want = (2 * sms + blocks - 1) / blocks;
    const int64_t allowed = std::min<int64_t>(rows / kMinKeysPerSplit, max_splits);
    ASSERT_EQ(plan.num_splits, std::max<int64_t>(1, std::min(want, allowed)));
  }
  // Llama-3-8B decode, B=1 at 32k past on 132 SMs: 8 kv heads x 1 tile, 264 blocks wanted ->
  // 33 splits of ceil(32768 / 33) = 993 keys.
  const SplitPlan llama = PlanSplits(8, 32768, 132, MaxSplits(32768));
  EXPECT_EQ(llama.num_splits, 33);
  EXPECT_EQ(llama.keys_per_split, 993);
  // Large batches are not split.
  EXPECT_EQ(PlanSplits(64 * 8, 32768, 132, MaxSplits(32768)).num_splits, 1);
}

TEST(CudaPlan, QueryTiles) {
  EXPECT_EQ(DecodeQueryTiles(1), 1);
  EXPECT_EQ(DecodeQueryTiles(16), 1);
  EXPECT_EQ(DecodeQueryTiles(17), 2);
  EXPECT_EQ(DecodeQueryTiles(32), 2);
}

TEST(CudaPlan, LaunchShapesFitSm80SharedMemory) {
  for (int32_t h : {64, 128, 256}) {
    const FlashLaunch f = FlashLaunchFor(h);
    EXPECT_EQ(f.threads, 128);
    EXPECT_EQ(f.block_q, 64);
    // Q tile + two stages of K and V tiles, rows of H + 8 two-byte elements.
    EXPECT_EQ(f.smem_bytes, static_cast<size_t>((h + 8) * 2 * (64 + 4 * f.block_k)));
    EXPECT_LE(static_cast<int64_t>(f.smem_bytes), A100().max_smem_optin) << h;
    const DecodeLaunch d = DecodeLaunchFor(h);
    EXPECT_LE(static_cast<int64_t>(d.smem_bytes), A100().max_smem_optin) << h;
    // The merge area: four warps x 16 rows x H fp32 plus max and sum per row, after the Q tile.
    EXPECT_GE(d.smem_bytes, static_cast<size_t>((h + 8) * 2 * 16 + 4 * (16 * h + 32) * 4));
    EXPECT_EQ(d.keys_per_tile % 16, 0);
  }
  EXPECT_EQ(FlashLaunchFor(256).block_k, 32);
  EXPECT_EQ(FlashLaunchFor(128).block_k, 64);
}

TEST(CudaPlan, WorkspaceRegionsAreAlignedAndDisjoint) {
  for (KernelKind kind :
       {KernelKind::kXqa, KernelKind::kFlash, KernelKind::kFlashDecode, KernelKind::kUnfused}) {
    for (bool rotary : {false, true}) {
      for (bool present : {false, true}) {
        attnrt_gqa_problem p = Decode();
        p.attributes.do_rotary = rotary ? 1 : 0;
        p.has_present = present;
        const WorkspaceLayout w = ComputeWorkspace(p, kind);
        struct Region {
          size_t at, bytes;
        };
        std::vector<Region> regions = {{w.batch_info, w.batch_info_bytes}};
        EXPECT_EQ(w.batch_info_bytes, 4u * 16u);
        if (rotary) {
          EXPECT_EQ(w.q_rotated_bytes, 4u * 32u * 128u * 2u);
          regions.push_back({w.q_rotated, w.q_rotated_bytes});
        } else {
          EXPECT_EQ(w.q_rotated_bytes, 0u);
        }
        if (!present) {
          EXPECT_EQ(w.scratch_bytes, 4u * 8u * 4097u * 128u * 2u);
          regions.push_back({w.k_scratch, w.scratch_bytes});
          regions.push_back({w.v_scratch, w.scratch_bytes});
        }
        if (kind == KernelKind::kXqa || kind == KernelKind::kFlashDecode) {
          const size_t splits = present ? 16 : 17;  // ceil(C / 256)
          EXPECT_EQ(w.partial_out_bytes, 4u * 32u * splits * 128u * 4u);
          EXPECT_EQ(w.partial_ml_bytes, 4u * 32u * splits * 2u * 4u);
          regions.push_back({w.partial_out, w.partial_out_bytes});
          regions.push_back({w.partial_ml, w.partial_ml_bytes});
        }
        if (kind == KernelKind::kUnfused) {
          EXPECT_EQ(w.scores_bytes, 4u * 32u * 1u * (present ? 4096u : 4097u) * 4u);
          regions.push_back({w.scores, w.scores_bytes});
        }
        for (size_t i = 0; i < regions.size(); ++i) {
          EXPECT_EQ(regions[i].at % 256, 0u);
          EXPECT_LE(regions[i].at + regions[i].bytes, w.total);
          for (size_t j = i + 1; j < regions.size(); ++j) {
            const bool disjoint = regions[i].at + regions[i].bytes <= regions[j].at ||
                                  regions[j].at + regions[j].bytes <= regions[i].at;
            EXPECT_TRUE(disjoint) << i << " " << j;
          }
        }
      }
    }
  }
}

TEST(CudaPlan, MisalignedPointersAreNamed) {
  alignas(16) static unsigned char buffer[64];
  attnrt_gqa_args a{};
  a.query = buffer;
  a.output = buffer + 16;
  EXPECT_EQ(MisalignedPointer(a), "");
  a.present_key = buffer + 2;
  const std::string why = MisalignedPointer(a);
  EXPECT_TRUE(Contains(why, "present_key")) << why;
  EXPECT_TRUE(Contains(why, "16-byte")) << why;
}

// The end of a row in every CUDA kernel (gqa_softmax_end.h), against the non-finite rule of
// docs/gqa-semantics.md worked out by hand: m is the row's largest score, sum the sum of
// exp(s - m), value an unnormalized output element.
TEST(CudaSoftmaxEnd, FollowsTheNonFiniteRule) {
  const float inf = INFINITY;
  // Plain softmax: value / sum.
  EXPECT_FLOAT_EQ(EndValue(EndRow(1.0f, 2.0f, false, 0.0f), 3.0f), 1.5f);
  // A sink of logit 0 beside one key of score 0: weight 1/2; of logit ln 3: weight 1/4.
  EXPECT_FLOAT_EQ(EndValue(EndRow(0.0f, 1.0f, true, 0.0f), 2.0f), 1.0f);
  EXPECT_NEAR(EndValue(EndRow(0.0f, 1.0f, true, std::log(3.0f)), 2.0f), 0.5f, 1e-6f);
  // A sink of -inf adds nothing.
  EXPECT_FLOAT_EQ(EndValue(EndRow(0.0f, 2.0f, true, -inf), 3.0f), 1.5f);
  // NaN rows: a NaN or +inf sink, a NaN sum (a NaN or +inf score), whatever the rest.
  for (const RowEnd end : {EndRow(0.0f, 1.0f, true, NAN), EndRow(0.0f, 1.0f, true, inf),
                           EndRow(0.0f, NAN, false, 0.0f), EndRow(-inf, NAN, false, 0.0f),
                           EndRow(-inf, 0.0f, true, NAN)}) {
    EXPECT_TRUE(std::isnan(EndValue(end, 1.0f)));
    EXPECT_TRUE(std::isnan(EndValue(end, 0.0f)));
  }
  // Zero rows: every score -inf (or no key), with or without a finite sink, whatever the
  // unnormalized value holds (0 * inf from a value row).
  for (const RowEnd end : {EndRow(-inf, 0.0f, false, 0.0f), EndRow(-inf, 0.0f, true, 2.0f)}) {
    EXPECT_EQ(EndValue(end, NAN), 0.0f);
    EXPECT_EQ(EndValue(end, inf), 0.0f);
  }
}

}  // namespace
}  // namespace attnrt::cuda
