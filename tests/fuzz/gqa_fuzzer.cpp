// libFuzzer target for GroupQueryAttention through the public C ABI (attnrt.h, ops/gqa.h).
//
// Each input is decoded with FuzzedDataProvider into one call sequence:
//   attnrt_op_create -> attnrt_op_explain -> attnrt_op_plan (twice: the second hits the plan cache)
//   -> attnrt_plan_run (workspace of the planned size, NULL, too small or misaligned).
// The decoder first builds a mostly consistent problem (attributes, phase, shapes, values; an input
// of zero bytes decodes to a valid float32 prompt), then applies a few mutations (presence,
// extents, ranks, dtypes, devices, strides, NULL data, offsets, aliasing). Every tensor is backed
// by a heap buffer of exactly the bytes its shape and dtype describe (int4: two elements per byte),
// so any access outside what the caller described is reported by AddressSanitizer. A shape too
// large to allocate gets NULL data (attnrt must then refuse to run, it may still plan).
//
// Invariants checked (a violation aborts with a description, which libFuzzer records as a crash):
//   - a failing call returns a known non-OK status and a non-empty attnrt_last_error_message();
//     a successful one leaves "" behind;
//   - no call returns ATTNRT_ERROR_INTERNAL, and plan/explain/run never ABI_MISMATCH;
//   - explain and plan agree: explain fails <=> plan fails with the same status; explain with a
//     selected candidate <=> plan succeeds and picks that kernel; no selected one => UNSUPPORTED;
//   - planning the same tensors again returns the same kernel from the op's plan cache;
//   - run with the planned tensors never reports PLAN_MISMATCH; a run with a too small or
//     misaligned workspace fails; a failing run leaves every output byte untouched;
//   - every other GQA kernel that accepts a call that ran gives the same answer on the same inputs,
//     NaN and infinities included (fuzz_agreement.h; float32 values of amplitude <= 4 with at most
//     one NaN or inf per input, the padded rows of a windowed first prompt aside).
//
// Seeds: GQA_FUZZER_WRITE_SEEDS=DIR ./gqa_fuzzer -runs=0 searches deterministic sparse inputs (and
// the files in GQA_FUZZER_SEED_SOURCE=DIR2, e.g. a campaign's corpus, for the rare classes) and
// writes the smallest one that runs for each class (prompt, decode, packed, ...) into DIR.
#include <fuzzer/FuzzedDataProvider.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"
#include "fuzz_agreement.h"
#include "fuzz_rng.h"

namespace {

constexpr attnrt_dtype kF32 = ATTNRT_DTYPE_FLOAT32;
constexpr attnrt_dtype kF16 = ATTNRT_DTYPE_FLOAT16;
constexpr attnrt_dtype kBF16 = ATTNRT_DTYPE_BFLOAT16;
constexpr attnrt_dtype kI8 = ATTNRT_DTYPE_INT8;
constexpr attnrt_dtype kU8 = ATTNRT_DTYPE_UINT8;
constexpr attnrt_dtype kI32 = ATTNRT_DTYPE_INT32;
constexpr attnrt_dtype kI64 = ATTNRT_DTYPE_INT64;
constexpr attnrt_dtype kI4 = ATTNRT_DTYPE_INT4;
constexpr attnrt_dtype kF8E4M3 = ATTNRT_DTYPE_FLOAT8_E4M3FN;
constexpr attnrt_dtype kF8E5M2 = ATTNRT_DTYPE_FLOAT8_E5M2;
constexpr attnrt_dtype kF8E8M0 = ATTNRT_DTYPE_FLOAT8_E8M0FNU;
// Not known to attnrt: float64, an odd bit width, two lanes, an undefined code.
constexpr attnrt_dtype kF64{ATTNRT_DTYPE_CODE_FLOAT, 64, 1};
constexpr attnrt_dtype kOddBits{ATTNRT_DTYPE_CODE_INT, 12, 1};
constexpr attnrt_dtype kTwoLanes{ATTNRT_DTYPE_CODE_FLOAT, 32, 2};
constexpr attnrt_dtype kBadCode{7, 32, 1};

constexpr attnrt_dtype kAnyDtype[] = {kF32, kF16,    kBF16,   kI8,  kU8,      kI32,      kI64,
                                      kI4,  kF8E4M3, kF8E8M0, kF64, kOddBits, kTwoLanes, kBadCode};

// Largest tensor the fuzzer backs with memory; larger ones get NULL data.
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 22;
// Largest workspace the fuzzer allocates for a run.
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 26;

constexpr int kNumInputs = ATTNRT_GQA_NUM_INPUTS;
constexpr int kNumSlots = int{ATTNRT_GQA_NUM_INPUTS} + int{ATTNRT_GQA_NUM_OUTPUTS};
constexpr int Out(int output) { return kNumInputs + output; }

constexpr const char* kSlotNames[kNumSlots] = {
    "query",          "key",          "value",       "past_key",      "past_value",
    "seqlens_k",      "total_seqlen", "cos_cache",   "sin_cache",     "position_ids",
    "attention_bias", "head_sink",    "k_scale",     "v_scale",       "q_norm_weight",
    "k_norm_weight",  "output",       "present_key", "present_value", "output_qk"};

// ---- decoding helpers ---------------------------------------------------------------------------

// Thin layer over FuzzedDataProvider. Exhausted data yields 0 for every choice, so the first entry
// of each table is the common, valid case and OneIn() is false.
class Choices {
 public:
  explicit Choices(FuzzedDataProvider& fdp) : fdp_(fdp) {}
  uint32_t Pick(uint32_t n) { return n <= 1 ? 0 : fdp_.ConsumeIntegralInRange<uint32_t>(0, n - 1); }
  bool OneIn(uint32_t n) { return Pick(n) == n - 1; }
  bool Flag() { return fdp_.ConsumeBool(); }
  template <typename T, size_t K>
  T From(const T (&table)[K]) {
    return table[Pick(static_cast<uint32_t>(K))];
  }
  uint64_t Bits64() { return fdp_.ConsumeIntegral<uint64_t>(); }

 private:
  FuzzedDataProvider& fdp_;
};

using fuzz_rng::Rng;

// Known, reported and unfixed findings can be masked while fuzzing for others:
// GQA_FUZZER_AVOID=<token>[,<token>...]. A mask changes values only, never how bytes decode, so an
// input found with a mask reproduces without it.
//   position_ids_near_int64_max  position_ids values are clamped to [-2^62, 2^62]
//                                (core/ops/gqa_validation.cpp computes pos0 + S - 1 in its
//                                message).
//   misaligned                   element 0 of every tensor is 8-byte aligned (attnrt accepts
//                                misaligned float tensors; the plugin then accesses them as float).
//   empty_batch                  batch_size 0 becomes 1 (the flash kernel divides by B * Nkv).
struct Avoid {
  bool position_ids_near_int64_max = false;
  bool misaligned = false;
  bool empty_batch = false;
};
Avoid g_avoid;

// ---- the decoded case ---------------------------------------------------------------------------

struct TensorSpec {
  bool present = false;
  attnrt_dtype dtype = kF32;
  std::vector<int64_t> shape;
  bool ndim_override = false;  // ndim differs from shape.size() (negative or beyond the maximum)
  int32_t ndim = 0;
  bool shape_null = false;
  int strides_mode = 0;  // 0: NULL, 1: explicit compact strides, 2: non-compact strides
  std::vector<int64_t> strides;
  attnrt_device device{ATTNRT_DEVICE_CPU, 0};
  bool null_data = false;
  uint64_t lead = 0;             // bytes in front of element 0 in its own buffer
  bool use_byte_offset = false;  // express the lead with byte_offset instead of data
  int alias_of = -1;             // slot whose buffer this tensor shares
  uint64_t alias_offset = 0;     // bytes from that slot's element 0 to this one's
  // Layout, filled by Lay().
  bool backed = false;
  uint64_t bytes = 0;
  int buffer = -1;
  uint64_t start = 0;
  attnrt_tensor tensor{};
};

struct Case {
  int32_t op_kind = ATTNRT_OP_GQA;
  attnrt_gqa_attributes attributes{};
  size_t attributes_struct_size = sizeof(attnrt_gqa_attributes);
  bool null_attributes = false;
  TensorSpec slot[kNumSlots];
  size_t num_inputs = kNumInputs;
  size_t num_outputs = ATTNRT_GQA_NUM_OUTPUTS;
  bool null_input_array = false;
  bool null_output_array = false;
  // Values.
  std::vector<int32_t> seqlens;
  int32_t total_sequence_length = 0;
  std::vector<int64_t> positions;
  uint64_t seed = 0;
  float amplitude = 1.0f;
  int specials = 0;  // 0: finite values only; else one element in `specials` is NaN/inf/huge
  int workspace_mode = 0;
  int mismatch_mode = 0;
  bool multi_threaded = false;  // run on the runtime with kMultiThreads threads
  bool long_context = false;
  // Nominal problem, for the seed classes.
  int64_t batch = 0, seq = 0, past = 0, total = 0;
  bool packed = false, has_past = false, shares_past = false;
};

// a * b for extents: negative when either is, saturated at INT64_MAX.
int64_t MulClamp(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a == 0 || b == 0) return 0;
  if (a > std::numeric_limits<int64_t>::max() / b) return std::numeric_limits<int64_t>::max();
  return a * b;
}

// a + b without overflow (saturated).
int64_t AddSat(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

void SetTensor(TensorSpec* t, attnrt_dtype dtype, std::vector<int64_t> shape) {
  t->present = true;
  t->dtype = dtype;
  t->shape = std::move(shape);
}

float SpecialFloat(Choices& c) {
  constexpr float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(),
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 -0.0f,
                                 std::numeric_limits<float>::max(),
                                 -std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::denorm_min(),
                                 1e-30f,
                                 -1.0f,
                                 1e30f};
  return c.From(kSpecials);
}

// A mutation of one tensor: what a careless or hostile caller could pass.
void Mutate(Choices& c, Case* k) {
  TensorSpec& t = k->slot[c.Pick(kNumSlots)];
  switch (c.Pick(12)) {
    case 0:  // toggle presence
      if (t.present) {
        t.present = false;
      } else {
        std::vector<int64_t> shape(1 + c.Pick(4));
        for (auto& d : shape) d = c.Pick(9);
        SetTensor(&t, c.OneIn(2) ? c.From(kAnyDtype) : k->slot[0].dtype, std::move(shape));
      }
      break;
    case 1:  // one extent off
      if (!t.shape.empty()) {
        int64_t& d = t.shape[c.Pick(static_cast<uint32_t>(t.shape.size()))];
        const int64_t options[] = {
            AddSat(d, 1), AddSat(d, -1), 0, 1, AddSat(d, d), static_cast<int64_t>(c.Pick(65))};
        d = c.From(options);
      }
      break;
    case 2:  // one extent huge or negative
      if (!t.shape.empty()) {
        constexpr int64_t kHuge[] = {int64_t{1} << 31,
                                     INT32_MAX,
                                     int64_t{1} << 40,
                                     std::numeric_limits<int64_t>::max(),
                                     -1,
                                     std::numeric_limits<int64_t>::min(),
                                     int64_t{1} << 56,
                                     int64_t{1} << 62};
        t.shape[c.Pick(static_cast<uint32_t>(t.shape.size()))] = c.From(kHuge);
      }
      break;
    case 3:  // rank: drop or add a dimension
      if (!t.shape.empty() && c.Flag()) {
        t.shape.erase(t.shape.begin() + c.Pick(static_cast<uint32_t>(t.shape.size())));
      } else if (t.shape.size() < 8) {
        t.shape.insert(t.shape.begin() + c.Pick(static_cast<uint32_t>(t.shape.size() + 1)),
                       c.Flag() ? 1 : 2);
      }
      break;
    case 4:
      t.dtype = c.From(kAnyDtype);
      break;
    case 5: {
      constexpr attnrt_device kDevices[] = {
          {ATTNRT_DEVICE_CUDA, 0}, {ATTNRT_DEVICE_CPU, 1}, {ATTNRT_DEVICE_CUDA, 1}, {7, 0}, {0, 0},
          {ATTNRT_DEVICE_CPU, -1}};
      t.device = c.From(kDevices);
      break;
    }
    case 6:
      t.strides_mode = 1 + c.Pick(2);
      break;
    case 7:
      t.null_data = true;
      break;
    case 8:  // element 0 further into its buffer, aligned or not
      t.lead = c.OneIn(4) ? 1 + c.Pick(7) : 8 * (1 + c.Pick(8));
      t.use_byte_offset = c.Flag();
      break;
    case 9:  // ndim the shape array does not back up (the array still holds what ndim claims)
      t.ndim_override = true;
      t.ndim = c.Flag() ? -1 - static_cast<int32_t>(c.Pick(2)) : 9;
      if (t.ndim > 0) t.shape.assign(static_cast<size_t>(t.ndim), 1);
      break;
    case 10:
      if (!t.shape.empty()) t.shape_null = true;
      break;
    default:  // empty tensor
      if (!t.shape.empty()) t.shape[c.Pick(static_cast<uint32_t>(t.shape.size()))] = 0;
      break;
  }
}

void Decode(Choices& c, Case* k) {
  attnrt_gqa_attributes& a = k->attributes;
  attnrt_gqa_attributes_init(&a);

  // ---- attributes ----
  int64_t N = 1 + c.Pick(8);
  if (c.OneIn(48)) {
    constexpr int64_t kBadHeads[] = {0, -1, -8, INT32_MIN, INT32_MAX, 1 << 16};
    N = c.From(kBadHeads);
  }
  int64_t Nkv = 1;
  {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= N && d <= 8; ++d) {
      if (N % d == 0) divisors.push_back(d);
    }
    const uint32_t mode = c.Pick(16);
    if (mode < 13 && !divisors.empty()) {
      Nkv = divisors[mode % divisors.size()];
    } else if (mode == 13) {
      Nkv = 0;
    } else if (mode == 14) {
      Nkv = N + 1;
    } else {
      constexpr int64_t kBadKv[] = {-1, INT32_MIN, INT32_MAX, 3, 16};
      Nkv = c.From(kBadKv);
    }
  }
  a.num_heads = static_cast<int32_t>(N);
  a.kv_num_heads = static_cast<int32_t>(Nkv);

  {
    const uint32_t m = c.Pick(16);
    a.causal = m < 14 ? 1 : m == 14 ? 0 : c.OneIn(2) ? 2 : -1;
  }
  {
    const uint32_t m = c.Pick(8);
    if (m == 6) a.local_window_size = static_cast<int32_t>(c.Pick(12));
    if (m == 7) {
      constexpr int32_t kWindows[] = {-2, -5, INT32_MIN, INT32_MAX, 1, 0};
      a.local_window_size = c.From(kWindows);
    }
    if (a.causal == 0 && a.local_window_size != -1 && !c.OneIn(4)) a.local_window_size = -1;
  }
  {
    const uint32_t m = c.Pick(8);
    if (m == 6) a.scale = (static_cast<float>(c.Pick(2001)) - 1000.0f) / 250.0f;
    if (m == 7) a.scale = SpecialFloat(c);
  }
  {
    const uint32_t m = c.Pick(8);
    if (m == 6) a.softcap = 0.5f + static_cast<float>(c.Pick(1000)) / 20.0f;
    if (m == 7) a.softcap = SpecialFloat(c);
  }
  {
    const uint32_t m = c.Pick(8);
    a.do_rotary = m < 5 ? 0 : m < 7 ? 1 : c.OneIn(2) ? 2 : -1;
    const uint32_t i = c.Pick(4);
    a.rotary_interleaved = i < 2 ? 0 : i == 2 ? 1 : 2;
  }
  {
    const uint32_t m = c.Pick(8);
    a.smooth_softmax = m < 4 ? -1 : m == 4 ? 0 : m < 7 ? 1 : c.OneIn(2) ? 2 : INT32_MIN;
  }
  {
    const uint32_t m = c.Pick(16);
    a.qk_output = m < 11 ? 0 : m < 13 ? 1 : m < 15 ? 2 : c.OneIn(2) ? 3 : -1;
  }
  {
    const uint32_t m = c.Pick(16);
    if (m >= 13) {
      a.k_quant_type = m == 13   ? ATTNRT_GQA_QUANT_PER_BLOCK_32
                       : m == 14 ? ATTNRT_GQA_QUANT_PER_TENSOR
                                 : ATTNRT_GQA_QUANT_PER_CHANNEL;
      a.v_quant_type = a.k_quant_type;
      a.kv_cache_bit_width = c.Flag() ? 4 : 8;
      if (c.OneIn(8)) {
        constexpr int32_t kBadBits[] = {0, 2, 16, -8};
        a.kv_cache_bit_width = c.From(kBadBits);
      }
      if (c.OneIn(8)) {
        constexpr int32_t kQuant[] = {0, 1, 2, 3, 4, -1};
        a.v_quant_type = c.From(kQuant);
      }
    } else if (c.OneIn(32)) {
      a.kv_cache_bit_width = 8;
    }
    if (c.OneIn(64)) {
      constexpr int32_t kBadQuant[] = {4, -1, INT32_MAX};
      a.k_quant_type = c.From(kBadQuant);
    }
  }
  if (c.OneIn(16)) {
    a.sliding_window_cache = 1;
    if (a.local_window_size <= 0 && !c.OneIn(4)) {
      a.local_window_size = 1 + static_cast<int32_t>(c.Pick(8));
    }
  } else if (c.OneIn(64)) {
    a.sliding_window_cache = c.Flag() ? 2 : -1;
  }
  if (c.OneIn(32)) a.qk_norm_epsilon = SpecialFloat(c);
  const bool quantized = a.k_quant_type != ATTNRT_GQA_QUANT_NONE;
  const bool windowed = a.sliding_window_cache == 1;
  if (c.OneIn(64)) {
    constexpr size_t kSizes[] = {0,
                                 4,
                                 sizeof(size_t),
                                 sizeof(attnrt_gqa_attributes) - 4,
                                 sizeof(attnrt_gqa_attributes) + 8,
                                 sizeof(attnrt_gqa_attributes) + 64};
    k->attributes_struct_size = c.From(kSizes);
  }
  if (c.OneIn(128)) k->null_attributes = true;
  if (c.OneIn(128)) k->op_kind = c.Flag() ? 0 : 2;

  // ---- problem ----
  constexpr int64_t kBatches[] = {1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 1, 1, 2, 1, 0};
  constexpr int64_t kHeadSizes[] = {16, 16, 8, 32, 64, 24, 16, 32, 8, 64, 16, 32, 0, 12, 17, 4};
  int64_t B = c.From(kBatches);
  if (g_avoid.empty_batch && B == 0) B = 1;
  int64_t H = c.From(kHeadSizes);
  const uint32_t phase = c.Pick(4);  // 0 prompt, 1 decode, 2 chunked prompt, 3 prompt with past
  const bool packed = c.Pick(4) == 3;
  int64_t S = phase == 1 ? 1 : phase == 2 ? 2 + c.Pick(7) : 1 + c.Pick(8);
  if (c.OneIn(32)) S = 0;
  bool has_past = phase == 0   ? c.OneIn(4)
                  : phase == 1 ? !c.OneIn(8)
                  : phase == 2 ? !c.OneIn(4)
                               : true;
  if (quantized || windowed) has_past = true;
  if (phase == 2 && !c.OneIn(8)) B = 1;
  int64_t P = c.Pick(17);
  // Long context, rarely: several key blocks per tile, several query tiles, and (with the
  // multi-threaded runtime) flash decoding's split key range, which needs >= 512 keys.
  k->long_context = c.OneIn(16);
  if (k->long_context) {
    constexpr int64_t kLongHeadSizes[] = {64, 128, 256, 32};
    H = c.From(kLongHeadSizes);
    if (phase != 1 && S != 0) S = phase == 2 ? 2 + c.Pick(31) : 1 + c.Pick(48);
    P = 200 + c.Pick(1000);
    B = std::min<int64_t>(B, 2);
    // Keep each cache within what the fuzzer backs with memory.
    const int64_t row_bytes = MulClamp(MulClamp(B, Nkv), MulClamp(H, 4));
    if (row_bytes > 0) {
      P = std::min<int64_t>(P, static_cast<int64_t>(kMaxTensorBytes) / row_bytes - S - 8);
    }
    P = std::max<int64_t>(P, 0);
  }
  const bool shares = has_past && (phase == 1 || phase == 2) && c.Pick(3) == 2;
  int64_t T;
  if (phase == 0 || phase == 3) {
    T = S;
  } else if (shares) {
    const int64_t prefix = P;
    P = prefix + S + c.Pick(4);
    T = prefix + S;
  } else if (has_past) {
    T = P + S;
  } else {
    T = S + c.Pick(9);
  }
  int64_t L = S;
  if (!packed && has_past && c.OneIn(6)) {
    L = 0;  // shared KV: the past holds every key row
    if (P < T) P = T;
  }
  if (windowed && P < a.local_window_size && !c.OneIn(4)) P = a.local_window_size;
  const bool has_present = quantized || shares || !c.OneIn(8);
  int64_t present_len = shares || windowed ? P : std::max(T, P);
  if (c.OneIn(16)) present_len += c.Flag() ? 1 : -1;

  attnrt_dtype T_dtype = kF32;
  {
    const uint32_t m = c.Pick(16);
    if (m == 13) T_dtype = kF16;
    if (m == 14) T_dtype = kBF16;
    if (m == 15) T_dtype = c.From(kAnyDtype);
  }
  attnrt_dtype cache_dtype = T_dtype;
  int64_t Hc = H;
  const bool blocks = a.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32;
  if (blocks) {
    // ggml's Q8_0/Q4_0 blocks: H/32 blocks of 34 or 18 bytes (their float16 scales are whatever
    // bytes Fill leaves, non-finite ones included).
    cache_dtype = c.OneIn(8) ? kI8 : kU8;
    Hc = H / 32 * (a.kv_cache_bit_width == 4 ? 18 : 34);
  } else if (quantized) {
    cache_dtype = a.kv_cache_bit_width == 4 ? kU8
                  : c.OneIn(4)              ? (c.OneIn(2) ? kF8E5M2 : kF8E4M3)
                                            : kI8;
    if (a.kv_cache_bit_width == 4) Hc = H / 2;
  }

  k->batch = B;
  k->seq = S;
  k->past = P;
  k->total = T;
  k->packed = packed;
  k->has_past = has_past;
  k->shares_past = shares;

  TensorSpec* s = k->slot;
  const int64_t q_heads = packed ? N + 2 * Nkv : N;
  SetTensor(&s[ATTNRT_GQA_INPUT_QUERY], T_dtype, {B, S, MulClamp(q_heads, H)});
  if (!packed) {
    SetTensor(&s[ATTNRT_GQA_INPUT_KEY], T_dtype, {B, L, MulClamp(Nkv, H)});
    SetTensor(&s[ATTNRT_GQA_INPUT_VALUE], T_dtype, {B, L, MulClamp(Nkv, H)});
  }
  if (has_past) {
    SetTensor(&s[ATTNRT_GQA_INPUT_PAST_KEY], cache_dtype, {B, Nkv, P, Hc});
    SetTensor(&s[ATTNRT_GQA_INPUT_PAST_VALUE], cache_dtype, {B, Nkv, P, Hc});
  }
  {
    const uint32_t m = c.Pick(16);
    std::vector<int64_t> shape{B};
    if (m == 13) shape = {B, 1};
    if (m == 14) shape = {1, B};
    if (m == 15) {
      const std::vector<int64_t> odd[] = {{}, {B + 1}, {2, 2}, {B, B}};
      shape = c.From(odd);
    }
    SetTensor(&s[ATTNRT_GQA_INPUT_SEQLENS_K], kI32, std::move(shape));
  }
  {
    const uint32_t m = c.Pick(8);
    std::vector<int64_t> shape;
    if (m >= 4 && m < 7) shape = {1};
    if (m == 7) {
      const std::vector<int64_t> odd[] = {{2}, {1, 1}, {0}};
      shape = c.From(odd);
    }
    SetTensor(&s[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH], kI32, std::move(shape));
  }
  int64_t M = 0;
  if ((a.do_rotary == 1 && !c.OneIn(16)) || c.OneIn(16)) {
    const int64_t halves[] = {H / 2, H / 2, H / 2, 8, H / 4, 4, H};
    const int64_t half = c.From(halves);
    const int64_t extra[] = {0, 0, 1, 2, 4, 8, -1, -T};
    M = std::max<int64_t>(0, T + c.From(extra));
    SetTensor(&s[ATTNRT_GQA_INPUT_COS_CACHE], T_dtype, {M, half});
    SetTensor(&s[ATTNRT_GQA_INPUT_SIN_CACHE], T_dtype, {M, half});
    if (c.OneIn(16)) s[ATTNRT_GQA_INPUT_SIN_CACHE].shape = {M + 1, half == 8 ? 16 : 8};
  }
  if (a.do_rotary == 1 ? c.Pick(3) == 0 : c.OneIn(16)) {
    SetTensor(&s[ATTNRT_GQA_INPUT_POSITION_IDS], kI64, {B, S + c.Pick(3)});
  }
  if (c.OneIn(5)) {
    SetTensor(&s[ATTNRT_GQA_INPUT_ATTENTION_BIAS], T_dtype,
              {c.Flag() ? 1 : B, c.Flag() ? 1 : N, S, c.OneIn(16) ? T + 1 : T});
  }
  if (c.OneIn(5)) SetTensor(&s[ATTNRT_GQA_INPUT_HEAD_SINK], T_dtype, {N});
  if ((quantized && !blocks) || c.OneIn(16)) {
    const bool per_channel = a.k_quant_type == ATTNRT_GQA_QUANT_PER_CHANNEL;
    for (int i : {ATTNRT_GQA_INPUT_K_SCALE, ATTNRT_GQA_INPUT_V_SCALE}) {
      std::vector<int64_t> shape;
      if (per_channel) {
        shape =
            c.Flag() ? std::vector<int64_t>{MulClamp(Nkv, H)} : std::vector<int64_t>{1, Nkv, 1, H};
      } else if (c.Flag()) {
        shape = {1};
      }
      if (c.OneIn(8)) shape = {static_cast<int64_t>(c.Pick(4)) + 2};
      SetTensor(&s[i], kF32, std::move(shape));
    }
  }
  for (int i : {ATTNRT_GQA_INPUT_Q_NORM_WEIGHT, ATTNRT_GQA_INPUT_K_NORM_WEIGHT}) {
    if (c.OneIn(48)) SetTensor(&s[i], T_dtype, {H});
  }
  SetTensor(&s[Out(ATTNRT_GQA_OUTPUT_OUTPUT)], T_dtype, {B, S, MulClamp(N, H)});
  if (has_present) {
    SetTensor(&s[Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY)], cache_dtype, {B, Nkv, present_len, Hc});
    SetTensor(&s[Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE)], cache_dtype, {B, Nkv, present_len, Hc});
  }
  if (a.qk_output != 0 ? !c.OneIn(16) : c.OneIn(32)) {
    SetTensor(&s[Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK)], T_dtype, {B, N, S, c.OneIn(16) ? T + 1 : T});
  }
  if (shares) {
    s[Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY)].alias_of = ATTNRT_GQA_INPUT_PAST_KEY;
    s[Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE)].alias_of = ATTNRT_GQA_INPUT_PAST_VALUE;
  }

  // ---- values ----
  const int64_t kSeqlensValues = std::max<int64_t>(B, 1) + 1;
  for (int64_t b = 0; b < kSeqlensValues; ++b) {
    const uint32_t m = c.Pick(16);
    int64_t v = T - 1;
    if (m >= 12 && m < 15) v = T > 0 ? c.Pick(static_cast<uint32_t>(std::min<int64_t>(T, 64))) : 0;
    if (m == 15) {
      const int64_t odd[] = {-1, INT32_MIN, INT32_MAX, T, present_len, P, S - 2, 1 << 20};
      v = c.From(odd);
    }
    k->seqlens.push_back(static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)));
  }
  {
    const uint32_t m = c.Pick(16);
    int64_t v = T;
    if (m >= 14) {
      const int64_t odd[] = {0, -1, INT32_MIN, INT32_MAX, T + 1, T - 1, P, 1 << 20};
      v = c.From(odd);
    }
    k->total_sequence_length = static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX));
  }
  if (s[ATTNRT_GQA_INPUT_POSITION_IDS].present) {
    const int64_t row = s[ATTNRT_GQA_INPUT_POSITION_IDS].shape[1];
    const int64_t start =
        M > S ? c.Pick(static_cast<uint32_t>(std::min<int64_t>(M - S + 1, 64))) : 0;
    for (int64_t i = 0; i < std::min<int64_t>(B * row, 64); ++i) {
      const int64_t b = i / row;
      const int64_t j = i % row;
      const uint32_t m = c.Pick(16);
      // First prompt: start + j; otherwise the position attnrt would derive.
      int64_t v = S == T ? start + j
                         : int64_t{k->seqlens[static_cast<size_t>(b % kSeqlensValues)]} + 1 - S + j;
      if (m >= 12 && m < 15)
        v = M > 0 ? c.Pick(static_cast<uint32_t>(std::min<int64_t>(M, 64))) : 0;
      if (m == 15) {
        const int64_t odd[] = {-1,
                               M,
                               M - S + 1,
                               std::numeric_limits<int64_t>::max(),
                               std::numeric_limits<int64_t>::min(),
                               int64_t{1} << 40};
        v = c.From(odd);
      }
      k->positions.push_back(v);
    }
  }
  {
    constexpr float kAmplitudes[] = {1.0f, 4.0f, 0.01f, 1000.0f};
    k->amplitude = c.From(kAmplitudes);
    k->specials = c.OneIn(8) ? 1 + static_cast<int>(c.Pick(6)) : 0;
    k->seed = c.Bits64();
  }

  // ---- what the caller gets wrong ----
  const uint32_t mutations = c.OneIn(3) ? 1 + c.Pick(3) : 0;
  for (uint32_t i = 0; i < mutations; ++i) Mutate(c, k);

  // Aliasing beyond the legal present == past.
  switch (c.Pick(24)) {
    case 16:  // present_key overlaps past_key, at another start
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY)].alias_of = ATTNRT_GQA_INPUT_PAST_KEY;
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY)].alias_offset =
          c.OneIn(4) ? 1 + c.Pick(7) : 4 * (1 + c.Pick(32));
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE)].alias_of = ATTNRT_GQA_INPUT_PAST_VALUE;
      break;
    case 17:  // only present_key is past_key's memory
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY)].alias_of = ATTNRT_GQA_INPUT_PAST_KEY;
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE)].alias_of = -1;
      break;
    case 18:  // output inside query
      s[Out(ATTNRT_GQA_OUTPUT_OUTPUT)].alias_of = ATTNRT_GQA_INPUT_QUERY;
      s[Out(ATTNRT_GQA_OUTPUT_OUTPUT)].alias_offset = 4 * c.Pick(16);
      break;
    case 19:  // present_value overlaps present_key
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE)].alias_of = Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY);
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE)].alias_offset = 4 * c.Pick(16);
      break;
    case 20:  // output_qk overlaps output
      s[Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK)].alias_of = Out(ATTNRT_GQA_OUTPUT_OUTPUT);
      s[Out(ATTNRT_GQA_OUTPUT_OUTPUT_QK)].alias_offset = 4 * c.Pick(16);
      break;
    case 21:  // inputs sharing memory (legal: inputs are read-only)
      s[ATTNRT_GQA_INPUT_KEY].alias_of = ATTNRT_GQA_INPUT_QUERY;
      s[ATTNRT_GQA_INPUT_VALUE].alias_of = ATTNRT_GQA_INPUT_QUERY;
      break;
    case 22:  // an output over seqlens_k, the value that bounds every access
      s[Out(c.Pick(ATTNRT_GQA_NUM_OUTPUTS))].alias_of = ATTNRT_GQA_INPUT_SEQLENS_K;
      break;
    case 23:  // present over past_value instead of past_key (crossed)
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_KEY)].alias_of = ATTNRT_GQA_INPUT_PAST_VALUE;
      s[Out(ATTNRT_GQA_OUTPUT_PRESENT_VALUE)].alias_of = ATTNRT_GQA_INPUT_PAST_KEY;
      break;
    default:
      break;
  }
  if (c.OneIn(8)) {  // everything shifted inside its buffer
    for (TensorSpec& t : k->slot) {
      if (t.lead == 0) t.lead = 16 * (1 + c.Pick(4));
      t.use_byte_offset = c.Flag();
    }
  }

  // ---- how it is passed ----
  if (c.OneIn(4)) {  // trimmed to the last present tensor (the reference's node arity)
    size_t last_in = 0, last_out = 0;
    for (int i = 0; i < kNumInputs; ++i) {
      if (s[i].present) last_in = static_cast<size_t>(i) + 1;
    }
    for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
      if (s[Out(i)].present) last_out = static_cast<size_t>(i) + 1;
    }
    k->num_inputs = std::max<size_t>(last_in, ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH + 1);
    k->num_outputs = std::max<size_t>(last_out, 1);
  }
  if (c.OneIn(48)) {
    constexpr size_t kCounts[] = {0, 1, 6, 7, kNumInputs + 1};
    k->num_inputs = c.From(kCounts);
  }
  if (c.OneIn(48)) {
    constexpr size_t kCounts[] = {0, 2, ATTNRT_GQA_NUM_OUTPUTS + 1};
    k->num_outputs = c.From(kCounts);
  }
  k->null_input_array = c.OneIn(128);
  k->null_output_array = c.OneIn(128);
  k->workspace_mode = static_cast<int>(c.Pick(8));
  k->mismatch_mode = c.OneIn(16) ? 1 + static_cast<int>(c.Pick(3)) : 0;
  k->multi_threaded = c.Pick(4) == 3;
}

// ---- memory -------------------------------------------------------------------------------------

struct Buffer {
  uint64_t size = 0;
  std::unique_ptr<unsigned char[]> bytes;
};

// Bytes of a tensor of this shape and dtype, or false when it is not backed by memory (negative
// extent, or more than kMaxTensorBytes). Element counts follow the dtype's bits (int4: two per
// byte).
bool TensorBytes(const TensorSpec& t, uint64_t* bytes) {
  uint64_t elements = 1;
  bool zero = false;
  for (int64_t d : t.shape) {
    if (d < 0) return false;
    if (d == 0) zero = true;
  }
  if (zero) {
    *bytes = 0;
    return true;
  }
  for (int64_t d : t.shape) {
    if (elements > (kMaxTensorBytes * 8) / static_cast<uint64_t>(d)) return false;
    elements *= static_cast<uint64_t>(d);
  }
  const uint64_t bits = uint64_t{t.dtype.bits} * std::max<uint64_t>(t.dtype.lanes, 1);
  *bytes = (elements * bits + 7) / 8;
  return *bytes <= kMaxTensorBytes;
}

void Lay(Case* k, std::vector<Buffer>* buffers) {
  if (g_avoid.misaligned) {
    for (TensorSpec& t : k->slot) {
      t.lead = (t.lead + 7) / 8 * 8;
      t.alias_offset = (t.alias_offset + 7) / 8 * 8;
    }
  }
  // Only a present tensor with a buffer of its own can be shared.
  for (TensorSpec& t : k->slot) {
    if (t.alias_of >= 0 && (!k->slot[t.alias_of].present || k->slot[t.alias_of].alias_of >= 0)) {
      t.alias_of = -1;
    }
  }
  // Tensors with their own buffer first, then those that share one.
  for (int pass = 0; pass < 2; ++pass) {
    for (TensorSpec& t : k->slot) {
      if (!t.present || (t.alias_of >= 0) != (pass == 1)) continue;
      t.backed = !t.null_data && TensorBytes(t, &t.bytes);
      if (!t.backed) continue;
      if (t.alias_of >= 0 && k->slot[t.alias_of].backed) {
        const TensorSpec& target = k->slot[t.alias_of];
        t.buffer = target.buffer;
        t.start = target.start + t.alias_offset;
      } else {
        t.buffer = static_cast<int>(buffers->size());
        buffers->emplace_back();
        t.start = t.lead;
      }
      Buffer& buffer = (*buffers)[static_cast<size_t>(t.buffer)];
      buffer.size = std::max(buffer.size, t.start + t.bytes);
    }
  }
  for (Buffer& buffer : *buffers) {
    // Exactly size bytes (0 included): AddressSanitizer reports any access beyond them.
    buffer.bytes.reset(new unsigned char[buffer.size]);
  }
}

template <typename V>
void Store(TensorSpec& t, std::vector<Buffer>& buffers, uint64_t index, V value) {
  if (!t.backed || (index + 1) * sizeof(V) > t.bytes) return;
  std::memcpy(buffers[static_cast<size_t>(t.buffer)].bytes.get() + t.start + index * sizeof(V),
              &value, sizeof(V));
}

void Fill(Case* k, std::vector<Buffer>* buffers) {
  Rng rng(k->seed);
  for (Buffer& buffer : *buffers) {
    unsigned char* p = buffer.bytes.get();
    uint64_t i = 0;
    for (; i + 4 <= buffer.size; i += 4) {
      const float v = rng.Unit() * k->amplitude;
      std::memcpy(p + i, &v, 4);
    }
    for (; i < buffer.size; ++i) p[i] = static_cast<unsigned char>(rng.Next());
  }
  if (k->specials != 0) {
    constexpr float kSpecials[] = {std::numeric_limits<float>::quiet_NaN(),
                                   std::numeric_limits<float>::infinity(),
                                   -std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::max(),
                                   -1e30f,
                                   std::numeric_limits<float>::denorm_min()};
    const float special = kSpecials[(k->specials - 1) % 6];
    for (int i = 0; i < kNumInputs; ++i) {
      TensorSpec& t = k->slot[i];
      if (!t.present || !t.backed || t.dtype.code != kF32.code || t.dtype.bits != 32) continue;
      const uint64_t n = t.bytes / 4;
      if (n > 0) Store(t, *buffers, rng.Next() % n, special);
    }
  }
  TensorSpec& seqlens = k->slot[ATTNRT_GQA_INPUT_SEQLENS_K];
  for (uint64_t i = 0; seqlens.present && i < seqlens.bytes / 4; ++i) {
    Store(seqlens, *buffers, i, k->seqlens[i % k->seqlens.size()]);
  }
  TensorSpec& total = k->slot[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH];
  for (uint64_t i = 0; total.present && i < total.bytes / 4; ++i) {
    Store(total, *buffers, i, k->total_sequence_length);
  }
  TensorSpec& positions = k->slot[ATTNRT_GQA_INPUT_POSITION_IDS];
  for (uint64_t i = 0; positions.present && i < positions.bytes / 8; ++i) {
    int64_t v = i < k->positions.size() ? k->positions[i] : 0;
    if (g_avoid.position_ids_near_int64_max) {
      v = std::clamp<int64_t>(v, -(int64_t{1} << 62), int64_t{1} << 62);
    }
    Store(positions, *buffers, i, v);
  }
}

void MakeTensors(Case* k, std::vector<Buffer>& buffers) {
  for (TensorSpec& t : k->slot) {
    if (!t.present) continue;
    // The shape array always holds as many extents as ndim claims.
    if (t.ndim_override && t.ndim > 0 && t.shape.size() < static_cast<size_t>(t.ndim)) {
      t.shape.resize(static_cast<size_t>(t.ndim), 1);
    }
    attnrt_tensor& x = t.tensor;
    x.device = t.device;
    x.dtype = t.dtype;
    x.ndim = t.ndim_override ? t.ndim : static_cast<int32_t>(t.shape.size());
    x.shape = t.shape_null || t.shape.empty() ? nullptr : t.shape.data();
    if (t.strides_mode != 0 && !t.shape.empty()) {
      t.strides.assign(t.shape.size(), 1);
      int64_t stride = 1;
      for (size_t d = t.shape.size(); d-- > 0;) {
        t.strides[d] = t.strides_mode == 1 ? stride : AddSat(AddSat(stride, stride), 1);
        stride = MulClamp(stride, std::max<int64_t>(t.shape[d], 1));
      }
      x.strides = t.strides.data();
    }
    if (t.backed) {
      unsigned char* base = buffers[static_cast<size_t>(t.buffer)].bytes.get();
      x.byte_offset = t.use_byte_offset ? t.start : 0;
      x.data = base + (t.start - x.byte_offset);
    }
  }
}

// ---- description --------------------------------------------------------------------------------
// For triage: printed on an invariant violation, and before the calls with GQA_FUZZER_VERBOSE=1.

const Case* g_case = nullptr;
bool g_verbose = false;

void DescribeCase(const Case& k) {
  const attnrt_gqa_attributes& a = k.attributes;
  std::fprintf(stderr,
               "case: kind=%d struct_size=%zu%s num_heads=%d kv_num_heads=%d causal=%d scale=%g "
               "softcap=%g local_window_size=%d sliding_window_cache=%d do_rotary=%d "
               "rotary_interleaved=%d smooth_softmax=%d qk_output=%d k_quant_type=%d "
               "v_quant_type=%d kv_cache_bit_width=%d\n",
               k.op_kind, k.attributes_struct_size, k.null_attributes ? " (NULL attributes)" : "",
               a.num_heads, a.kv_num_heads, a.causal, static_cast<double>(a.scale),
               static_cast<double>(a.softcap), a.local_window_size, a.sliding_window_cache,
               a.do_rotary, a.rotary_interleaved, a.smooth_softmax, a.qk_output, a.k_quant_type,
               a.v_quant_type, a.kv_cache_bit_width);
  std::fprintf(stderr, "  num_inputs=%zu%s num_outputs=%zu%s workspace_mode=%d mismatch_mode=%d\n",
               k.num_inputs, k.null_input_array ? " (NULL array)" : "", k.num_outputs,
               k.null_output_array ? " (NULL array)" : "", k.workspace_mode, k.mismatch_mode);
  for (int i = 0; i < kNumSlots; ++i) {
    const TensorSpec& t = k.slot[i];
    if (!t.present) continue;
    std::string shape = "[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      shape += (d > 0 ? "," : "") + std::to_string(t.shape[d]);
    }
    shape += "]";
    std::fprintf(
        stderr,
        "  %-15s dtype{%u,%u,%u} %s ndim=%d device=%d:%d%s%s strides=%d bytes=%llu "
        "buffer=%d start=%llu byte_offset=%llu%s\n",
        kSlotNames[i], t.dtype.code, t.dtype.bits, t.dtype.lanes, shape.c_str(), t.tensor.ndim,
        t.device.device_type, t.device.device_id, t.shape_null ? " shape=NULL" : "",
        t.backed ? "" : " data=NULL", t.strides_mode, static_cast<unsigned long long>(t.bytes),
        t.buffer, static_cast<unsigned long long>(t.start),
        static_cast<unsigned long long>(t.tensor.byte_offset),
        t.alias_of >= 0 ? (std::string(" aliases ") + kSlotNames[t.alias_of]).c_str() : "");
  }
  std::string seqlens, positions;
  for (int32_t v : k.seqlens) seqlens += std::to_string(v) + " ";
  for (int64_t v : k.positions) positions += std::to_string(v) + " ";
  std::fprintf(stderr,
               "  values: seqlens_k {%s} total_sequence_length %d positions {%s} amplitude %g "
               "specials %d\n",
               seqlens.c_str(), k.total_sequence_length, positions.c_str(),
               static_cast<double>(k.amplitude), k.specials);
}

// ---- invariants ---------------------------------------------------------------------------------

[[noreturn]] void Fail(const char* what, const char* call, attnrt_status status) {
  std::fprintf(stderr,
               "\n==== gqa_fuzzer invariant violated: %s\n  call: %s\n  status: %s (%d)\n"
               "  last error: \"%s\"\n",
               what, call, attnrt_status_name(status), static_cast<int>(status),
               attnrt_last_error_message());
  if (g_case != nullptr) DescribeCase(*g_case);
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, call, status)                    \
  do {                                                    \
    if (!(cond)) Fail("check '" #cond "'", call, status); \
  } while (0)

// Every call: a known status; "" iff OK; never INTERNAL.
attnrt_status Checked(const char* call, attnrt_status status, bool abi_mismatch_allowed = false) {
  const char* message = attnrt_last_error_message();
  FUZZ_CHECK(message != nullptr, call, status);
  FUZZ_CHECK(status >= ATTNRT_OK && status <= ATTNRT_ERROR_INTERNAL, call, status);
  FUZZ_CHECK(attnrt_status_name(status) != nullptr, call, status);
  if (status == ATTNRT_OK) {
    FUZZ_CHECK(message[0] == '\0', call, status);
  } else {
    FUZZ_CHECK(message[0] != '\0', call, status);
  }
  FUZZ_CHECK(status != ATTNRT_ERROR_INTERNAL, call, status);
  if (!abi_mismatch_allowed) FUZZ_CHECK(status != ATTNRT_ERROR_ABI_MISMATCH, call, status);
  return status;
}

// Two runtimes, each created once: one thread (deterministic, the default), and kMultiThreads
// threads, without which flash decoding never splits the key range (it splits only when B * Nkv
// tiles leave threads idle).
constexpr int32_t kMultiThreads = 3;
attnrt_runtime* g_runtime = nullptr;
attnrt_runtime* g_runtime_mt = nullptr;

struct Stats {
  uint64_t cases = 0, created = 0, planned = 0, ran = 0, compared = 0;
};
Stats g_stats;

// The same thread counts, each runtime pinned to one GQA kernel (cross-kernel agreement).
fuzz_agreement::PinnedRuntimes g_pinned, g_pinned_mt;

struct Outcome {
  bool created = false;
  bool planned = false;
  bool ran = false;
};

// Snapshot of every output byte, to check that a failing run writes nothing.
std::vector<unsigned char> SnapshotOutputs(const Case& k, const std::vector<Buffer>& buffers) {
  std::vector<unsigned char> bytes;
  for (int o = 0; o < ATTNRT_GQA_NUM_OUTPUTS; ++o) {
    const TensorSpec& t = k.slot[Out(o)];
    if (!t.present || !t.backed) continue;
    const unsigned char* p = buffers[static_cast<size_t>(t.buffer)].bytes.get() + t.start;
    bytes.insert(bytes.end(), p, p + t.bytes);
  }
  return bytes;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

void RunPlan(Case& k, std::vector<Buffer>& buffers, attnrt_plan* plan, const attnrt_plan_info& info,
             const attnrt_tensor* const* inputs, const attnrt_tensor* const* outputs,
             Outcome* outcome) {
  const size_t ws = info.workspace_size;
  const size_t alignment = info.workspace_alignment;
  FUZZ_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0, "attnrt_plan_get_info",
             ATTNRT_OK);
  if (ws > kMaxWorkspaceBytes) return;
  // 0-4: exact size; 5: NULL (runtime allocates); 6: one byte short; 7: misaligned.
  const int mode = k.workspace_mode;
  std::unique_ptr<void, FreeDeleter> owned;
  void* workspace = nullptr;
  size_t workspace_size = 0;
  if (mode != 5) {
    const size_t size = mode == 7 ? ws + 1 : std::max<size_t>(ws, 1);
    void* p = nullptr;
    FUZZ_CHECK(posix_memalign(&p, std::max(alignment, sizeof(void*)), size) == 0, "posix_memalign",
               ATTNRT_OK);
    owned.reset(p);
    workspace = mode == 7 ? static_cast<unsigned char*>(p) + 1 : p;
    workspace_size = mode == 6 ? (ws > 0 ? ws - 1 : 0) : ws;
  }
  const bool must_fail = (mode == 6 && ws > 0) || mode == 7;

  const attnrt_tensor* run_inputs[kNumInputs + 1] = {};
  std::copy(inputs, inputs + kNumInputs + 1, run_inputs);
  attnrt_tensor changed{};
  if (k.mismatch_mode != 0 && run_inputs[0] != nullptr) {
    // A tensor that differs from the planned one: a dtype with fewer bytes per element, so the
    // description never exceeds the memory behind it.
    changed = *run_inputs[0];
    changed.dtype = changed.dtype.bits == 16 ? kI8 : kF16;
    run_inputs[0] = &changed;
  }

  const std::vector<unsigned char> before = SnapshotOutputs(k, buffers);
  const attnrt_status status = Checked(
      "attnrt_plan_run", attnrt_plan_run(plan, k.null_input_array ? nullptr : run_inputs,
                                         k.num_inputs, k.null_output_array ? nullptr : outputs,
                                         k.num_outputs, workspace, workspace_size, nullptr));
  if (k.mismatch_mode == 0) {
    FUZZ_CHECK(status != ATTNRT_ERROR_PLAN_MISMATCH, "attnrt_plan_run (planned tensors)", status);
  }
  if (must_fail) {
    FUZZ_CHECK(status != ATTNRT_OK, "attnrt_plan_run (short or misaligned workspace)", status);
  }
  if (status != ATTNRT_OK) {
    FUZZ_CHECK(SnapshotOutputs(k, buffers) == before, "attnrt_plan_run (failed run wrote outputs)",
               status);
  }
  outcome->ran = status == ATTNRT_OK;
}

// Whether a call's outputs are one answer for every kernel: values of modest amplitude (larger
// ones make near-ties whose winner depends on rounding), at most NaN or inf as special values
// (FLT_MAX and -1e30 overflow in some summation orders only), a size worth running six times.
// 16-bit float tensors are out: Fill gives them random bit patterns, up to 3e38, whose products
// overflow in some summation orders only (quantized codes stay within code * scale).
bool Comparable(const Case& k, const std::vector<Buffer>& buffers) {
  uint64_t bytes = 0;
  for (const Buffer& b : buffers) bytes += b.size;
  for (const TensorSpec& t : k.slot) {
    if (t.present && t.dtype.bits == 16 &&
        (t.dtype.code == kF16.code || t.dtype.code == kBF16.code)) {
      return false;
    }
  }
  const int special = k.specials == 0 ? 0 : 1 + (k.specials - 1) % 6;
  return k.op_kind == ATTNRT_OP_GQA && !k.null_input_array && !k.null_output_array &&
         k.mismatch_mode == 0 && k.amplitude <= 4.0f && (special <= 3 || special == 6) &&
         bytes <= (uint64_t{1} << 20) && k.slot[Out(ATTNRT_GQA_OUTPUT_OUTPUT)].backed;
}

// Runs the call again on every GQA kernel that accepts it, from the input bytes the first run saw,
// and compares output (rows a windowed first prompt pads are path-dependent by design:
// gqa-semantics.md) and the present rows (bitwise) with the first run's.
void CheckAgreement(Case& k, std::vector<Buffer>& buffers,
                    const std::vector<std::vector<unsigned char>>& snapshot, const void* attributes,
                    const attnrt_tensor* const* in, const attnrt_tensor* const* out) {
  const TensorSpec& o = k.slot[Out(ATTNRT_GQA_OUTPUT_OUTPUT)];
  const int64_t count = o.dtype.bits == 32 || o.dtype.bits == 16 ? o.bytes * 8 / o.dtype.bits : 0;
  if (count == 0 || o.shape.size() != 3 || k.seqlens.empty()) return;
  const int64_t S = o.shape[1], row = o.shape[2];
  const bool padded = S == k.total_sequence_length && k.attributes.local_window_size >= 0;
  std::vector<fuzz_agreement::Output> compared;
  compared.push_back({"output", buffers[static_cast<size_t>(o.buffer)].bytes.get() + o.start, count,
                      o.dtype.bits, o.dtype.code == kBF16.code, [&](int64_t i) {
                        const int64_t b = i / (S * row), s = i / row % S;
                        const int64_t valid = k.seqlens[static_cast<size_t>(b) % k.seqlens.size()];
                        return !padded || row == 0 || s <= valid;
                      }});
  for (int p : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
    const TensorSpec& t = k.slot[Out(p)];
    if (!t.present || !t.backed) continue;
    compared.push_back({p == ATTNRT_GQA_OUTPUT_PRESENT_KEY ? "present_key" : "present_value",
                        buffers[static_cast<size_t>(t.buffer)].bytes.get() + t.start,
                        static_cast<int64_t>(t.bytes), 8, false, nullptr});
  }
  ++g_stats.compared;
  const auto first = fuzz_agreement::Save(compared);
  const double tolerance = o.dtype.bits == 32 ? 1e-3 : 2e-2;
  const fuzz_agreement::PinnedRuntimes& pinned = k.multi_threaded ? g_pinned_mt : g_pinned;
  for (size_t r = 0; r < pinned.runtimes.size(); ++r) {
    for (size_t b = 0; b < buffers.size(); ++b) {
      if (!snapshot[b].empty())
        std::memcpy(buffers[b].bytes.get(), snapshot[b].data(), snapshot[b].size());
    }
    const attnrt_status st = fuzz_agreement::PlanAndRun(pinned.runtimes[r], k.op_kind, attributes,
                                                        in, k.num_inputs, out, k.num_outputs);
    if (st == ATTNRT_ERROR_UNSUPPORTED) continue;
    FUZZ_CHECK(st == ATTNRT_OK, pinned.kernels[r].c_str(), st);
    const std::string differs = fuzz_agreement::Compare(compared, first, tolerance);
    if (!differs.empty()) {
      std::fprintf(stderr, "\n==== %s disagrees with the first kernel: %s\n",
                   pinned.kernels[r].c_str(), differs.c_str());
      Fail("cross-kernel agreement", pinned.kernels[r].c_str(), st);
    }
  }
}

Outcome RunCase(const uint8_t* data, size_t size) {
  Outcome outcome;
  FuzzedDataProvider fdp(data, size);
  Choices choices(fdp);
  Case k;
  Decode(choices, &k);

  // ---- tensors ----
  std::vector<Buffer> buffers;
  Lay(&k, &buffers);
  Fill(&k, &buffers);
  MakeTensors(&k, buffers);
  g_case = &k;
  struct ClearCase {
    ~ClearCase() { g_case = nullptr; }
  } clear_case;
  if (g_verbose) DescribeCase(k);

  // ---- op ----
  // The caller's attribute buffer holds exactly struct_size bytes (at least the size_t itself).
  const size_t attributes_bytes = std::max(k.attributes_struct_size, sizeof(size_t));
  std::unique_ptr<unsigned char[]> attributes(new unsigned char[attributes_bytes]());
  k.attributes.struct_size = k.attributes_struct_size;
  std::memcpy(attributes.get(), &k.attributes, std::min(attributes_bytes, sizeof(k.attributes)));
  attnrt_op* op = nullptr;
  const attnrt_status created =
      Checked("attnrt_op_create",
              attnrt_op_create(k.multi_threaded ? g_runtime_mt : g_runtime, k.op_kind,
                               k.null_attributes ? nullptr : attributes.get(), &op),
              /*abi_mismatch_allowed=*/true);
  if (created != ATTNRT_OK) {
    FUZZ_CHECK(k.null_attributes || k.op_kind != ATTNRT_OP_GQA ||
                   k.attributes_struct_size < sizeof(attnrt_gqa_attributes) ||
                   created == ATTNRT_ERROR_INVALID_ARGUMENT,
               "attnrt_op_create", created);
    attnrt_op_destroy(op);
    return outcome;
  }
  FUZZ_CHECK(op != nullptr, "attnrt_op_create", created);
  outcome.created = true;
  std::unique_ptr<attnrt_op, decltype(&attnrt_op_destroy)> op_owner(op, &attnrt_op_destroy);

  // One extra NULL entry so that a count beyond the maximum still reads a valid array.
  const attnrt_tensor* inputs[kNumInputs + 1] = {};
  const attnrt_tensor* outputs[ATTNRT_GQA_NUM_OUTPUTS + 1] = {};
  for (int i = 0; i < kNumInputs; ++i) {
    if (k.slot[i].present) inputs[i] = &k.slot[i].tensor;
  }
  for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
    if (k.slot[Out(i)].present) outputs[i] = &k.slot[Out(i)].tensor;
  }
  const attnrt_tensor* const* in = k.null_input_array ? nullptr : inputs;
  const attnrt_tensor* const* out = k.null_output_array ? nullptr : outputs;

  // ---- explain ----
  attnrt_explanation* explanation = nullptr;
  const attnrt_status explained =
      Checked("attnrt_op_explain",
              attnrt_op_explain(op, in, k.num_inputs, out, k.num_outputs, &explanation));
  std::string selected;
  bool has_selected = false;
  if (explained == ATTNRT_OK) {
    FUZZ_CHECK(explanation != nullptr, "attnrt_op_explain", explained);
    size_t count = 0;
    Checked("attnrt_explanation_count", attnrt_explanation_count(explanation, &count));
    for (size_t i = 0; i < count; ++i) {
      attnrt_candidate candidate{};
      candidate.struct_size = sizeof(candidate);
      const attnrt_status st = Checked("attnrt_explanation_candidate",
                                       attnrt_explanation_candidate(explanation, i, &candidate));
      FUZZ_CHECK(st == ATTNRT_OK, "attnrt_explanation_candidate", st);
      FUZZ_CHECK(candidate.kernel != nullptr && candidate.kernel[0] != '\0',
                 "attnrt_explanation_candidate", st);
      FUZZ_CHECK(candidate.reason != nullptr, "attnrt_explanation_candidate", st);
      FUZZ_CHECK(attnrt_candidate_status_name(candidate.status) != nullptr,
                 "attnrt_candidate_status_name", st);
      const bool chosen = candidate.status == ATTNRT_CANDIDATE_SELECTED;
      if (chosen || candidate.status == ATTNRT_CANDIDATE_ELIGIBLE) {
        FUZZ_CHECK(candidate.reason[0] == '\0', "attnrt_explanation_candidate (reason)", st);
      } else {
        FUZZ_CHECK(candidate.reason[0] != '\0', "attnrt_explanation_candidate (reason)", st);
      }
      if (chosen) {
        FUZZ_CHECK(!has_selected, "attnrt_op_explain (two selected candidates)", st);
        has_selected = true;
        selected = candidate.kernel;
      }
    }
    attnrt_candidate beyond{};
    beyond.struct_size = sizeof(beyond);
    const attnrt_status st = Checked("attnrt_explanation_candidate (index = count)",
                                     attnrt_explanation_candidate(explanation, count, &beyond));
    FUZZ_CHECK(st != ATTNRT_OK, "attnrt_explanation_candidate (index = count)", st);
  } else {
    FUZZ_CHECK(explanation == nullptr, "attnrt_op_explain", explained);
  }
  attnrt_explanation_destroy(explanation);

  // ---- plan ----
  attnrt_plan* plan = nullptr;
  const attnrt_status planned =
      Checked("attnrt_op_plan", attnrt_op_plan(op, in, k.num_inputs, out, k.num_outputs, &plan));
  std::unique_ptr<attnrt_plan, decltype(&attnrt_plan_release)> plan_owner(plan,
                                                                          &attnrt_plan_release);
  if (explained != ATTNRT_OK) {
    FUZZ_CHECK(planned == explained, "attnrt_op_plan (explain failed, plan must fail alike)",
               planned);
  } else if (has_selected) {
    FUZZ_CHECK(planned == ATTNRT_OK, "attnrt_op_plan (explain selected a kernel)", planned);
  } else {
    FUZZ_CHECK(planned == ATTNRT_ERROR_UNSUPPORTED, "attnrt_op_plan (explain selected no kernel)",
               planned);
  }
  if (planned != ATTNRT_OK) {
    FUZZ_CHECK(plan == nullptr, "attnrt_op_plan (failed, out_plan)", planned);
    return outcome;
  }
  FUZZ_CHECK(plan != nullptr, "attnrt_op_plan", planned);
  outcome.planned = true;
  attnrt_plan_info info{};
  info.struct_size = sizeof(info);
  const attnrt_status got = Checked("attnrt_plan_get_info", attnrt_plan_get_info(plan, &info));
  FUZZ_CHECK(got == ATTNRT_OK, "attnrt_plan_get_info", got);
  FUZZ_CHECK(info.kernel != nullptr && selected == info.kernel,
             "attnrt_plan_get_info (kernel differs from explain's selected one)", got);
  FUZZ_CHECK(info.signature != nullptr, "attnrt_plan_get_info", got);

  // Same tensors again: a cache hit with the same kernel.
  uint64_t hits = 0, misses = 0;
  Checked("attnrt_op_plan_cache_stats", attnrt_op_plan_cache_stats(op, &hits, &misses));
  attnrt_plan* again = nullptr;
  const attnrt_status replanned = Checked(
      "attnrt_op_plan (again)", attnrt_op_plan(op, in, k.num_inputs, out, k.num_outputs, &again));
  std::unique_ptr<attnrt_plan, decltype(&attnrt_plan_release)> again_owner(again,
                                                                           &attnrt_plan_release);
  FUZZ_CHECK(replanned == ATTNRT_OK, "attnrt_op_plan (again)", replanned);
  uint64_t hits2 = 0, misses2 = 0;
  Checked("attnrt_op_plan_cache_stats", attnrt_op_plan_cache_stats(op, &hits2, &misses2));
  FUZZ_CHECK(hits2 == hits + 1 && misses2 == misses, "attnrt_op_plan (again: a cache hit)",
             replanned);
  attnrt_plan_info info2{};
  info2.struct_size = sizeof(info2);
  Checked("attnrt_plan_get_info", attnrt_plan_get_info(again, &info2));
  FUZZ_CHECK(
      std::strcmp(info.kernel, info2.kernel) == 0 && info.workspace_size == info2.workspace_size,
      "attnrt_op_plan (again: same kernel and workspace)", replanned);

  // ---- run ----
  const bool compared = Comparable(k, buffers);
  std::vector<std::vector<unsigned char>> snapshot;
  if (compared) {
    for (const Buffer& b : buffers) snapshot.emplace_back(b.bytes.get(), b.bytes.get() + b.size);
  }
  RunPlan(k, buffers, plan, info, inputs, outputs, &outcome);
  if (compared && outcome.ran) CheckAgreement(k, buffers, snapshot, attributes.get(), in, out);
  return outcome;
}

// ---- seeds --------------------------------------------------------------------------------------

// Decodes sparse pseudo-random inputs (most bytes 0, so most choices take their common value) and
// keeps the shortest one that runs for each class. Deterministic: same binary, same seeds.
void WriteSeeds(const char* dir) {
  struct SeedClass {
    const char* name;
    bool (*matches)(const Case&, const Outcome&);
    std::vector<uint8_t> best;
  };
  SeedClass classes[] = {
      {"prompt",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.seq == k.total && k.seq > 1 && !k.packed && !k.has_past;
       },
       {}},
      {"decode",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.seq == 1 && k.total > 1 && k.has_past && !k.shares_past;
       },
       {}},
      {"decode_shared_buffer",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.seq == 1 && k.total > 1 && k.shares_past;
       },
       {}},
      {"packed_qkv",
       [](const Case& k, const Outcome& o) { return o.ran && k.packed && k.seq > 1; },
       {}},
      {"chunked_prompt",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.seq > 1 && k.total > k.seq && k.has_past;
       },
       {}},
      {"rotary",
       [](const Case& k, const Outcome& o) { return o.ran && k.attributes.do_rotary == 1; },
       {}},
      {"float16",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.slot[ATTNRT_GQA_INPUT_QUERY].dtype.bits == 16;
       },
       {}},
      {"qk_output_bias_sink",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.attributes.qk_output != 0 &&
                k.slot[ATTNRT_GQA_INPUT_ATTENTION_BIAS].present &&
                k.slot[ATTNRT_GQA_INPUT_HEAD_SINK].present;
       },
       {}},
      {"long_decode_multithreaded",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.long_context && k.multi_threaded && k.seq == 1 && k.total >= 512;
       },
       {}},
      {"long_prompt",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.long_context && k.seq > 16 && k.seq == k.total;
       },
       {}},
      {"quantized",
       [](const Case& k, const Outcome& o) {
         return o.ran && k.attributes.k_quant_type != ATTNRT_GQA_QUANT_NONE;
       },
       {}},
  };
  auto consider = [&](const std::vector<uint8_t>& bytes) {
    FuzzedDataProvider fdp(bytes.data(), bytes.size());
    Choices choices(fdp);
    Case k;
    Decode(choices, &k);
    const Outcome o = RunCase(bytes.data(), bytes.size());
    for (SeedClass& sc : classes) {
      if ((sc.best.empty() || bytes.size() < sc.best.size()) && sc.matches(k, o)) sc.best = bytes;
    }
  };
  Rng rng(20240601);
  for (int attempt = 0; attempt < 200000; ++attempt) {
    std::vector<uint8_t> bytes(8 + rng.Next() % 56);
    for (uint8_t& b : bytes) b = rng.Next() % 4 == 0 ? static_cast<uint8_t>(rng.Next()) : 0;
    consider(bytes);
  }
  // Rare classes: also the inputs of an earlier campaign (GQA_FUZZER_SEED_SOURCE=DIR).
  if (const char* source = std::getenv("GQA_FUZZER_SEED_SOURCE")) {
    for (const auto& entry : std::filesystem::directory_iterator(source)) {
      if (!entry.is_regular_file() || entry.file_size() > 1024) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      consider(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
    }
  }
  for (const SeedClass& sc : classes) {
    if (sc.best.empty()) {
      std::fprintf(stderr, "gqa_fuzzer: no seed found for class %s\n", sc.name);
      continue;
    }
    const std::string path = std::string(dir) + "/" + sc.name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(sc.best.data(), 1, sc.best.size(), f) != sc.best.size()) {
      std::fprintf(stderr, "gqa_fuzzer: cannot write %s\n", path.c_str());
      std::exit(1);
    }
    std::fclose(f);
    std::fprintf(stderr, "gqa_fuzzer: wrote %s (%zu bytes)\n", path.c_str(), sc.best.size());
  }
}

// GQA_FUZZER_STATS=1: how far the inputs got, printed at exit.

void PrintStats() {
  std::fprintf(stderr,
               "gqa_fuzzer stats: %llu cases, %llu ops created, %llu planned, %llu ran, %llu "
               "compared across kernels\n",
               static_cast<unsigned long long>(g_stats.cases),
               static_cast<unsigned long long>(g_stats.created),
               static_cast<unsigned long long>(g_stats.planned),
               static_cast<unsigned long long>(g_stats.ran),
               static_cast<unsigned long long>(g_stats.compared));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  for (attnrt_runtime** runtime : {&g_runtime, &g_runtime_mt}) {
    attnrt_runtime_options options;
    attnrt_runtime_options_init(&options);
    options.num_threads = runtime == &g_runtime ? 1 : kMultiThreads;
    const attnrt_status status = attnrt_runtime_create(&options, runtime);
    if (status != ATTNRT_OK) {
      std::fprintf(stderr, "gqa_fuzzer: attnrt_runtime_create failed: %s: %s\n",
                   attnrt_status_name(status), attnrt_last_error_message());
      std::exit(1);
    }
  }
  g_pinned.Create(ATTNRT_OP_GQA, 1);
  g_pinned_mt.Create(ATTNRT_OP_GQA, kMultiThreads);
  // Without a kernel only validation would be fuzzed: refuse, unless asked for explicitly.
  size_t plugins = 0;
  attnrt_runtime_plugin_count(g_runtime, &plugins);
  size_t kernels = 0;
  for (size_t i = 0; i < plugins; ++i) {
    attnrt_plugin_info info{};
    info.struct_size = sizeof(info);
    if (attnrt_runtime_plugin_info(g_runtime, i, &info) == ATTNRT_OK && info.available) {
      kernels += info.num_kernels;
    }
  }
  if (kernels == 0 && std::getenv("GQA_FUZZER_ALLOW_NO_KERNELS") == nullptr) {
    std::fprintf(stderr,
                 "gqa_fuzzer: no available plugin kernel was found (plugins: %zu). Build the "
                 "cpu_x86 plugin beside libattnrt.so or set ATTNRT_PLUGIN_PATH; set "
                 "GQA_FUZZER_ALLOW_NO_KERNELS=1 to fuzz validation only.\n",
                 plugins);
    size_t diagnostics = 0;
    attnrt_runtime_diagnostic_count(g_runtime, &diagnostics);
    for (size_t i = 0; i < diagnostics; ++i) {
      attnrt_diagnostic d{};
      d.struct_size = sizeof(d);
      if (attnrt_runtime_diagnostic(g_runtime, i, &d) == ATTNRT_OK) {
        std::fprintf(stderr, "  %s: %s\n", d.path, d.message);
      }
    }
    std::exit(1);
  }
  g_verbose = std::getenv("GQA_FUZZER_VERBOSE") != nullptr;
  if (std::getenv("GQA_FUZZER_STATS") != nullptr) std::atexit(PrintStats);
  if (const char* avoid = std::getenv("GQA_FUZZER_AVOID")) {
    const std::string tokens = std::string(",") + avoid + ",";
    g_avoid.position_ids_near_int64_max =
        tokens.find(",position_ids_near_int64_max,") != std::string::npos;
    g_avoid.misaligned = tokens.find(",misaligned,") != std::string::npos;
    g_avoid.empty_batch = tokens.find(",empty_batch,") != std::string::npos;
  }
  if (const char* dir = std::getenv("GQA_FUZZER_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Outcome o = RunCase(data, size);
  ++g_stats.cases;
  g_stats.created += o.created;
  g_stats.planned += o.planned;
  g_stats.ran += o.ran;
  return 0;
}
