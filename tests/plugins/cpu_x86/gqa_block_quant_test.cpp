// Conformance of every GQA kernel the CPU plugin registers (and of the runtime's own choice,
// "auto") with block-quantized KV caches, k_quant_type = v_quant_type = PER_BLOCK_32
// (attnrt/ops/gqa.h, ABI 1.7): ggml's Q8_0 (kv_cache_bit_width 8) and Q4_0 (4) blocks of 32
// elements with their own float16 scale, with float32, float16 and bfloat16 queries, over the kinds
// of cases of gqa_dtype_conformance_test.cpp (first, subsequent and decode phases, GQA ratios 2 to
// 8, shared buffers, packed QKV, shared KV, rotary, windows, bias, softcap, head sink, output_qk)
// and head sizes 32, 64, 96, 128, 160 and 256.
//
// Method (independent of the kernels; tests/common/dtype_reference.h):
//   - inputs are N(0,1) floats rounded to the query type T; K is rotated in float and rounded to T
//     before it is quantized (docs/gqa-semantics.md);
//   - each new K/V row is quantized by the test's own Q8_0/Q4_0 quantizer (ggml's
//     quantize_row_q8_0_ref / quantize_row_q4_0_ref): the present rows must equal those bytes, and
//     past rows the past bytes, byte for byte (rows the reference zero-fills: zero bytes);
//   - past rows are random blocks (random float16 d of either sign, every code value); past rows no
//     kernel may read have a NaN d in every block, so reading one shows as NaN in the output;
//   - the float64 reference (gqa_reference.h) runs on the dequantized values (q · d in float32);
//   - one case writes chosen blocks: all zeros (Q4_0 stores d = -0), a tie of largest magnitudes
//     (Q4_0 takes the first), Q8_0 codes at exact halves (roundf rounds away from zero), Q4_0
//     codes at the clamp, and a float16 subnormal d; another case has every d subnormal (values of
//     order 1e-4, compared with the absolute part of the bound scaled by 2^-10).
// Outputs are poisoned (NaN, and 0xA5 for present bytes). Tolerances: float32 1e-5; float16 and
// bfloat16 0.5 ulp of T + 1e-5 relative. Each run prints its maximum errors ("[observed]").
// Seeds: ATTNRT_TEST_SEED reproduces a run; it is printed on failure (SCOPED_TRACE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "common/test_support.h"
#include "gqa_block_quant_support.h"

namespace attnrt_test {
namespace {

using namespace block_quant;  // NOLINT(google-build-using-namespace)

enum Rotary { kNoRotary, kHalfSplit, kInterleaved };
enum Bias { kNoBias, kBias1NST, kBiasB1ST, kBiasBNST };

struct Case {
  std::string name;
  int64_t B = 1, S = 1, N = 4, Nkv = 2, H = 64;
  int64_t T = 1;
  std::vector<int32_t> seqlens;  // empty: T - 1 for every batch
  int64_t P = 0;                 // past rows
  bool shared_buffer = false;    // present_key/value are the past buffers
  bool packed = false;
  bool shared_kv = false;  // L = 0
  float softcap = 0.0f;
  int32_t window = -1;
  int32_t smooth = -1;
  int32_t qk_output = 0;
  Rotary rotary = kNoRotary;
  int64_t rotary_dim = 0;  // R; 0 = H
  bool position_ids = false;
  Bias bias = kNoBias;
  bool head_sink = false;
  bool chosen_blocks = false;  // batch 0's first new K/V rows hold the chosen blocks (H = 160)
  // K/V inputs scaled by 2^-14 and past blocks with float16 subnormal d: every d a subnormal
  // (an output of order 1e-4, so a d flushed to zero shows against the 1e-5 bound).
  bool subnormal_scales = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Case Prompt(std::string name, int64_t B, int64_t S, std::vector<int32_t> seqlens = {}) {
  Case c;
  c.name = std::move(name);
  c.B = B;
  c.S = S;
  c.T = S;
  c.seqlens = std::move(seqlens);
  return c;
}

Case Decode(std::string name, int64_t B, int64_t P, std::vector<int32_t> seqlens,
            bool shared_buffer = false) {
  Case c;
  c.name = std::move(name);
  c.B = B;
  c.P = P;
  c.T = *std::max_element(seqlens.begin(), seqlens.end()) + 1;
  c.seqlens = std::move(seqlens);
  c.shared_buffer = shared_buffer;
  return c;
}

Case Subsequent(std::string name, int64_t S, int64_t past_rows, int64_t P,
                bool shared_buffer = false) {
  Case c;
  c.name = std::move(name);
  c.S = S;
  c.P = P;
  c.T = past_rows + S;
  c.seqlens = {static_cast<int32_t>(past_rows + S - 1)};
  c.shared_buffer = shared_buffer;
  return c;
}

template <typename F>
Case With(Case c, F&& change) {
  change(c);
  return c;
}

std::vector<Case> Cases() {
  std::vector<Case> v;
  v.push_back(Prompt("prompt_right_padding", 3, 12, {11, 6, 2}));
  v.push_back(With(Decode("decode_past_h128_ratio4", 2, 40, {39, 20}), [](Case& c) {
    c.H = 128;
    c.N = 8;
  }));
  v.push_back(With(Decode("decode_shared_buffer_rotary", 2, 48, {30, 12}, true),
                   [](Case& c) { c.rotary = kHalfSplit; }));
  v.push_back(With(Subsequent("subsequent_prompt_window_h128", 5, 17, 17), [](Case& c) {
    c.window = 4;
    c.H = 128;
  }));
  v.push_back(With(Subsequent("subsequent_shared_buffer_rotary_ids", 5, 17, 32, true), [](Case& c) {
    c.rotary = kInterleaved;
    c.position_ids = true;
  }));
  v.push_back(With(Prompt("packed_prompt_partial_rotary", 2, 12, {11, 7}), [](Case& c) {
    c.packed = true;
    c.rotary = kHalfSplit;
    c.rotary_dim = 32;
  }));
  v.push_back(With(Decode("packed_decode_rotary_h128", 2, 20, {19, 7}), [](Case& c) {
    c.packed = true;
    c.rotary = kInterleaved;
    c.H = 128;
  }));
  v.push_back(With(Decode("window_bias_decode", 2, 30, {29, 10}), [](Case& c) {
    c.window = 8;
    c.bias = kBiasB1ST;
  }));
  v.push_back(With(Prompt("softcap_sink_qk_output_1_prompt", 2, 10, {9, 6}), [](Case& c) {
    c.softcap = 1.5f;
    c.head_sink = true;
    c.qk_output = 1;
    c.bias = kBiasBNST;
  }));
  v.push_back(With(Decode("smooth_window_qk_output_2_decode", 2, 20, {19, 7}), [](Case& c) {
    c.smooth = 1;
    c.window = 5;
    c.qk_output = 2;
  }));
  v.push_back(
      With(Decode("shared_kv_decode", 2, 24, {23, 9}), [](Case& c) { c.shared_kv = true; }));
  v.push_back(With(Decode("mqa_decode_h128_ratio8", 2, 33, {32, 5}), [](Case& c) {
    c.H = 128;
    c.N = 8;
    c.Nkv = 1;
  }));
  // Longer runs: a decode of one (batch, kv head) over 650 keys (split across threads by flash
  // decoding) and a chunked prompt of 40 tokens over 300 past rows (several key and query tiles).
  v.push_back(With(Decode("long_decode_split_kv_h128", 1, 700, {649}), [](Case& c) {
    c.H = 128;
    c.N = 8;
    c.Nkv = 1;
  }));
  v.push_back(With(Subsequent("long_subsequent_prompt", 40, 300, 340), [](Case& c) { c.N = 8; }));
  v.push_back(With(Decode("head_size_32_decode", 2, 24, {23, 9}), [](Case& c) { c.H = 32; }));
  v.push_back(With(Decode("head_size_96_decode", 2, 70, {69, 33}), [](Case& c) { c.H = 96; }));
  v.push_back(With(Prompt("head_size_256_prompt", 2, 12, {11, 7}), [](Case& c) { c.H = 256; }));
  v.push_back(With(Decode("head_size_256_decode_bias", 2, 21, {20, 3}), [](Case& c) {
    c.H = 256;
    c.bias = kBias1NST;
  }));
  v.push_back(With(Prompt("chosen_blocks_prompt_h160", 2, 4, {3, 2}), [](Case& c) {
    c.H = 160;
    c.chosen_blocks = true;
  }));
  v.push_back(With(Decode("subnormal_scales_decode", 2, 24, {23, 9}),
                   [](Case& c) { c.subnormal_scales = true; }));
  return v;
}

// ---- chosen blocks ------------------------------------------------------------------------------
// A row of 160 elements, negated for odd kv heads (then rounded to T: only block 4 changes):
//   block 0: zeros (Q8_0: d = +0; Q4_0: m = +0, d = -0 stored as 0x8000; every code the zero code);
//   block 1: values in (-2, 2) with -2.5 at 3 and +2.5 at 10 (Q4_0: the first, -2.5, sets d);
//   block 2: k/128 with max |x| = 127/64, so Q8_0 has d = 1/64 and x · id = k/2 exactly: odd k
//            are halves, which roundf takes away from zero;
//   block 3: k/32 with -1/2 first and +1/2 later (Q4_0: d = 1/16, x · id + 8.5 = k/2 + 8.5, so
//            +1/2 gives 16.5 and clamps to 15);
//   block 4: N(0,1) · 2^-14, so that d is a float16 subnormal (|d| < 2^-14).
std::vector<float> ChosenRow(std::mt19937_64& rng) {
  std::vector<float> row(160, 0.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int j = 128; j < 160; ++j) row[j] = std::ldexp(normal(rng), -14);
  std::uniform_real_distribution<float> small(-2.0f, 2.0f);
  std::uniform_int_distribution<int> k2(-254, 254), k3(-16, 16);
  for (int j = 0; j < 32; ++j) {
    row[32 + j] = RoundToFormat(FloatFormat::kBFloat16, small(rng));
    row[64 + j] = static_cast<float>(k2(rng)) / 128.0f;
    row[96 + j] = static_cast<float>(k3(rng)) / 32.0f;
  }
  row[32 + 3] = -2.5f;
  row[32 + 10] = 2.5f;
  row[64 + 5] = 127.0f / 64.0f;
  row[64 + 6] = 5.0f / 128.0f;    // x · id = 2.5 -> 3
  row[64 + 7] = -1.0f / 128.0f;   // -0.5 -> -1
  row[64 + 8] = -3.0f / 128.0f;   // -1.5 -> -2
  row[96 + 0] = -0.5f;            // sets d = 1/16
  row[96 + 1] = 0.5f;             // the tie: code 15 (clamped)
  row[96 + 2] = 15.5f / 32.0f;    // 16.25 -> 15
  row[96 + 3] = -1.0f / 32.0f;    // 8.0 -> 8
  row[96 + 4] = 1.0f / 32.0f;     // 9.0 -> 9
  row[96 + 5] = 5.0f / 32.0f;     // 11.0 -> 11
  row[96 + 6] = -15.0f / 32.0f;   // 1.0 -> 1
  row[96 + 20] = -16.0f / 32.0f;  // another -1/2 (a tie with the first)
  return row;
}

// ---- one case's tensors and reference inputs ----------------------------------------------------
struct Built {
  GqaTensors t;
  attnrt_gqa_attributes attributes{};
  GqaRefProblem problem;  // unpacked, RoPE already applied: do_rotary = 0
  // Reference values: q rotated and rounded to T; k, v, past_k, past_v dequantized (NaN in the
  // past rows no kernel may read). New rows (B, L, Nkv, H), past (B, Nkv, P, H).
  std::vector<float> q, k, v, past_k, past_v, bias, sink;
  int64_t row_bytes = 0;
  // The bytes: new rows as the test quantizes them, past rows as given (before the run).
  std::vector<uint8_t> new_k_bytes, new_v_bytes, past_k_bytes, past_v_bytes;
};

Built Build(const Case& c, const Dtypes& d, std::mt19937_64& rng) {
  Built b;
  GqaTensors& t = b.t;
  const FloatFormat Tq = d.query;
  const attnrt_dtype dq = QueryDtype(Tq);
  const int64_t B = c.B, S = c.S, N = c.N, Nkv = c.Nkv, H = c.H, T = c.T, P = c.P;
  const int64_t L = c.shared_kv ? 0 : S;
  const int64_t hidden = c.packed ? (N + 2 * Nkv) * H : N * H;
  const int64_t Hc = BlockRowBytes(d.cache, H);
  b.row_bytes = Hc;
  std::vector<int32_t> seqlens = c.seqlens;
  if (seqlens.empty()) seqlens.assign(static_cast<size_t>(B), static_cast<int32_t>(T - 1));
  const bool first_prompt = S == T;

  std::vector<float> query = RoundedNormal(Tq, B * S * hidden, rng);
  std::vector<float> q_in(static_cast<size_t>(B * S * N * H));
  std::vector<float> k_in(static_cast<size_t>(B * L * Nkv * H));
  std::vector<float> v_in(k_in.size());
  if (c.packed) {
    for (int64_t r = 0; r < B * S; ++r) {
      const float* row = query.data() + r * hidden;
      std::copy(row, row + N * H, q_in.begin() + r * N * H);
      std::copy(row + N * H, row + (N + Nkv) * H, k_in.begin() + r * Nkv * H);
      std::copy(row + (N + Nkv) * H, row + (N + 2 * Nkv) * H, v_in.begin() + r * Nkv * H);
    }
  } else {
    q_in = query;
    k_in = RoundedNormal(Tq, B * L * Nkv * H, rng);
    v_in = RoundedNormal(Tq, B * L * Nkv * H, rng);
    if (c.subnormal_scales) {
      for (auto* x : {&k_in, &v_in}) {
        for (float& e : *x) e = RoundToFormat(Tq, std::ldexp(e, -14));
      }
    }
    if (c.chosen_blocks) {  // batch 0, token 0, every kv head
      for (int64_t kh = 0; kh < Nkv; ++kh) {
        std::vector<float> row = ChosenRow(rng);
        for (float& x : row) x = RoundToFormat(Tq, kh % 2 ? -x : x);
        std::copy(row.begin(), row.end(), k_in.begin() + kh * H);
        std::copy(row.begin(), row.end(), v_in.begin() + kh * H);
      }
    }
    t[ATTNRT_GQA_INPUT_KEY] = Tensor(dq, {B, L, Nkv * H});
    t[ATTNRT_GQA_INPUT_VALUE] = Tensor(dq, {B, L, Nkv * H});
    Store(t[ATTNRT_GQA_INPUT_KEY], Tq, k_in);
    Store(t[ATTNRT_GQA_INPUT_VALUE], Tq, v_in);
  }
  t[ATTNRT_GQA_INPUT_QUERY] = Tensor(dq, {B, S, hidden});
  Store(t[ATTNRT_GQA_INPUT_QUERY], Tq, query);
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(seqlens, {B});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(T)}, {1});

  // RoPE in float on the rounded inputs, each rotated row rounded to T.
  const int64_t R = c.rotary == kNoRotary ? 0 : (c.rotary_dim > 0 ? c.rotary_dim : H);
  const int64_t half = R / 2;
  const int64_t M = T + 16;
  std::vector<float> cos_cache, sin_cache;
  std::vector<int64_t> ids;
  if (c.rotary != kNoRotary) {
    std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
    for (int64_t i = 0; i < M * half; ++i) {
      const double a = angle(rng);
      cos_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::cos(a))));
      sin_cache.push_back(RoundToFormat(Tq, static_cast<float>(std::sin(a))));
    }
    t[ATTNRT_GQA_INPUT_COS_CACHE] = Tensor(dq, {M, half});
    t[ATTNRT_GQA_INPUT_SIN_CACHE] = Tensor(dq, {M, half});
    Store(t[ATTNRT_GQA_INPUT_COS_CACHE], Tq, cos_cache);
    Store(t[ATTNRT_GQA_INPUT_SIN_CACHE], Tq, sin_cache);
    if (c.position_ids) {
      std::uniform_int_distribution<int64_t> any(0, first_prompt ? M - S : M - 1);
      ids.resize(static_cast<size_t>(B * S));
      for (auto& id : ids) id = any(rng);
      if (first_prompt) {
        for (int64_t s = 1; s < S; ++s) ids[static_cast<size_t>(s)] = ids[0] + s;
      }
      t[ATTNRT_GQA_INPUT_POSITION_IDS] = I64(ids, {B, S});
    }
  }
  auto position = [&](int64_t bb, int64_t s) -> int64_t {
    if (first_prompt) return (ids.empty() ? 0 : ids[0]) + s;
    if (!ids.empty()) return ids[static_cast<size_t>(bb * S + s)];
    return int64_t{seqlens[static_cast<size_t>(bb)]} + 1 - S + s;
  };
  auto rotate_rows = [&](std::vector<float>& x, int64_t rows, int64_t heads) {
    for (int64_t bb = 0; bb < B; ++bb) {
      for (int64_t s = 0; s < rows; ++s) {
        const int64_t pos = c.rotary == kNoRotary ? 0 : position(bb, s);
        for (int64_t h = 0; h < heads; ++h) {
          RotateAndRound(Tq, x.data() + ((bb * rows + s) * heads + h) * H, H,
                         c.rotary == kNoRotary ? nullptr : cos_cache.data() + pos * half,
                         c.rotary == kNoRotary ? nullptr : sin_cache.data() + pos * half, half,
                         c.rotary == kInterleaved);
        }
      }
    }
  };
  b.q = q_in;
  rotate_rows(b.q, S, N);
  std::vector<float> k_rot = k_in;
  rotate_rows(k_rot, L, Nkv);

  // New rows: quantized by the test's quantizer, and their dequantized values.
  const int64_t new_rows = B * L * Nkv;
  b.new_k_bytes.resize(static_cast<size_t>(new_rows * Hc));
  b.new_v_bytes.resize(b.new_k_bytes.size());
  b.k.resize(k_rot.size());
  b.v.resize(v_in.size());
  for (int64_t r = 0; r < new_rows; ++r) {
    QuantizeBlockRow(d.cache, k_rot.data() + r * H, H, b.new_k_bytes.data() + r * Hc);
    QuantizeBlockRow(d.cache, v_in.data() + r * H, H, b.new_v_bytes.data() + r * Hc);
    DequantizeBlockRow(d.cache, b.new_k_bytes.data() + r * Hc, H, b.k.data() + r * H);
    DequantizeBlockRow(d.cache, b.new_v_bytes.data() + r * Hc, H, b.v.data() + r * H);
  }

  // Past (B, Nkv, P, rows of Hc bytes): random blocks where a kernel may read, NaN-d blocks in the
  // rest (beyond each batch's valid past; all of it in a first prompt with new rows).
  auto readable = [&](int64_t row) {  // row of (B, Nkv, P)
    const int64_t bb = row / (Nkv * P);
    const int64_t j = row % P;
    const int64_t tb = int64_t{seqlens[static_cast<size_t>(bb)]} + 1;
    const int64_t valid = L == 0 ? tb : (first_prompt ? 0 : tb - S);
    return j < valid;
  };
  const int64_t past_rows = B * Nkv * P;
  for (int which = 0; which < 2; ++which) {
    std::vector<uint8_t>& bytes = which == 0 ? b.past_k_bytes : b.past_v_bytes;
    std::vector<float>& values = which == 0 ? b.past_k : b.past_v;
    bytes.resize(static_cast<size_t>(past_rows * Hc));
    values.assign(static_cast<size_t>(past_rows * H), kNaN);
    for (int64_t r = 0; r < past_rows; ++r) {
      if (readable(r)) {
        RandomBlockRow(d.cache, H, rng, bytes.data() + r * Hc, c.subnormal_scales);
        DequantizeBlockRow(d.cache, bytes.data() + r * Hc, H, values.data() + r * H);
      } else {
        PoisonBlockRow(d.cache, H, rng, bytes.data() + r * Hc);
      }
    }
    const auto input = which == 0 ? ATTNRT_GQA_INPUT_PAST_KEY : ATTNRT_GQA_INPUT_PAST_VALUE;
    t[input] = Tensor(kU8, {B, Nkv, P, Hc});
    if (!bytes.empty()) std::memcpy(t[input].data(), bytes.data(), bytes.size());
  }

  if (c.bias != kNoBias) {
    const int64_t bb = c.bias == kBias1NST ? 1 : B;
    const int64_t bn = c.bias == kBiasB1ST ? 1 : N;
    b.bias = RoundedNormal(Tq, bb * bn * S * T, rng);
    t[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = Tensor(dq, {bb, bn, S, T});
    Store(t[ATTNRT_GQA_INPUT_ATTENTION_BIAS], Tq, b.bias);
    b.problem.bias_batch = bb;
    b.problem.bias_heads = bn;
  }
  if (c.head_sink) {
    b.sink = RoundedNormal(Tq, N, rng);
    t[ATTNRT_GQA_INPUT_HEAD_SINK] = Tensor(dq, {N});
    Store(t[ATTNRT_GQA_INPUT_HEAD_SINK], Tq, b.sink);
  }

  // Outputs, poisoned.
  const int64_t present_rows = c.shared_buffer ? P : std::max<int64_t>(T, P);
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = Filled(Tq, {B, S, N * H}, kNaN);
  if (c.shared_buffer) {
    t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = t[ATTNRT_GQA_INPUT_PAST_KEY];
    t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = t[ATTNRT_GQA_INPUT_PAST_VALUE];
  } else {
    for (auto o : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
      t[o] = Tensor(kU8, {B, Nkv, present_rows, Hc});
      std::memset(t[o].data(), kBytePoison, t[o].bytes());
    }
  }
  if (c.qk_output != 0) t[ATTNRT_GQA_OUTPUT_OUTPUT_QK] = Filled(Tq, {B, N, S, T}, kNaN);

  attnrt_gqa_attributes& a = b.attributes;
  a = GqaAttributes(static_cast<int32_t>(N), static_cast<int32_t>(Nkv));
  a.softcap = c.softcap;
  a.local_window_size = c.window;
  a.do_rotary = c.rotary != kNoRotary ? 1 : 0;
  a.rotary_interleaved = c.rotary == kInterleaved ? 1 : 0;
  a.smooth_softmax = c.smooth;
  a.qk_output = c.qk_output;
  a.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
  a.kv_cache_bit_width = BitWidth(d.cache);

  GqaRefProblem& p = b.problem;
  p.batch_size = B;
  p.sequence_length = S;
  p.kv_sequence_length = L;
  p.num_heads = N;
  p.kv_num_heads = Nkv;
  p.head_size = H;
  p.packed_qkv = false;  // the reference reads the unpacked views
  p.has_past = true;
  p.past_length = P;
  p.has_present = true;
  p.present_length = present_rows;
  p.present_shares_past = c.shared_buffer;
  p.total_sequence_length = static_cast<int32_t>(T);
  p.seqlens_k = seqlens;
  p.softcap = c.softcap;
  p.local_window_size = c.window;
  p.smooth_softmax = c.smooth;
  p.qk_output = c.qk_output;
  p.do_rotary = 0;  // applied above
  p.has_head_sink = c.head_sink;
  return b;
}

GqaRefInputs RefInputs(const Built& b) {
  GqaRefInputs in;
  auto ptr = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
  in.query = ptr(b.q);
  in.key = ptr(b.k);
  in.value = ptr(b.v);
  in.past_key = ptr(b.past_k);
  in.past_value = ptr(b.past_v);
  in.attention_bias = ptr(b.bias);
  in.head_sink = ptr(b.sink);
  return in;
}

// Where each present row comes from, by the reference's present layout run on row ids: every
// element of past row r carries r + 1, of new row r carries -(r + 1); a zero-filled row gives 0.
std::vector<int64_t> PresentSources(const Built& b) {
  const GqaRefProblem& p = b.problem;
  const int64_t H = p.head_size;
  std::vector<float> past_id(b.past_k.size()), new_id(b.k.size());
  for (size_t i = 0; i < past_id.size(); ++i) past_id[i] = static_cast<float>(i / H + 1);
  for (size_t i = 0; i < new_id.size(); ++i) new_id[i] = -static_cast<float>(i / H + 1);
  GqaRefProblem ids = p;
  ids.qk_output = 0;
  GqaRefInputs in = RefInputs(b);
  in.key = new_id.empty() ? nullptr : new_id.data();
  in.value = in.key;
  in.past_key = past_id.empty() ? nullptr : past_id.data();
  in.past_value = in.past_key;
  const GqaRefOutputs out = ComputeGqaReference(ids, in);
  std::vector<int64_t> sources;
  for (size_t r = 0; r * H < out.present_key.size(); ++r) {
    sources.push_back(static_cast<int64_t>(out.present_key[r * H]));
  }
  return sources;
}

void ExpectPresent(const std::string& what, Tensor& got, const std::vector<uint8_t>& past,
                   const std::vector<uint8_t>& fresh, const std::vector<int64_t>& sources,
                   const Built& b, BlockFormat f) {
  const int64_t Hc = b.row_bytes;
  ASSERT_EQ(got.bytes(), sources.size() * static_cast<size_t>(Hc)) << what;
  const std::vector<uint8_t> zeros(static_cast<size_t>(Hc), 0);
  const auto* bytes = static_cast<const uint8_t*>(got.data());
  const int64_t rows_per_head = b.problem.present_length;
  const int64_t Nkv = b.problem.kv_num_heads;
  ExpectRowBytes(
      what, f, static_cast<int64_t>(sources.size()), Hc, [&](int64_t r) { return bytes + r * Hc; },
      [&](int64_t r) {
        const int64_t s = sources[static_cast<size_t>(r)];
        if (s > 0) return past.data() + (s - 1) * Hc;
        if (s < 0) return fresh.data() + (-s - 1) * Hc;
        return zeros.data();
      },
      [&](int64_t r) {
        const int64_t s = sources[static_cast<size_t>(r)];
        return "row [b " + std::to_string(r / rows_per_head / Nkv) + ", kv head " +
               std::to_string(r / rows_per_head % Nkv) + ", token " +
               std::to_string(r % rows_per_head) + "] (" +
               (s > 0   ? "a past row"
                : s < 0 ? "a new row"
                        : "zero-filled") +
               ")";
      });
}

// ---- the test body ------------------------------------------------------------------------------
using Param = std::tuple<std::string, Dtypes, Case>;

class GqaBlockQuant : public testing::TestWithParam<Param> {};

TEST_P(GqaBlockQuant, MatchesReference) {
  const std::string& pinned = std::get<0>(GetParam());
  const Dtypes& d = std::get<1>(GetParam());
  const Case& c = std::get<2>(GetParam());
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", dtypes " +
               d.name + ", case " + c.name);
  CleanAttnrtEnv env;
  std::mt19937_64 rng(TestSeed());
  Built b = Build(c, d, rng);
  ASSERT_FALSE(HasFatalFailure());

  attnrt_runtime_options options = DefaultOptions();
  options.kernel = pinned.c_str();  // "" pins nothing
  options.disable = "";
  RuntimePtr runtime = CreateRuntime(options);
  ASSERT_TRUE(runtime);
  attnrt_op* raw_op = nullptr;
  attnrt_status st = attnrt_op_create(runtime.get(), ATTNRT_OP_GQA, &b.attributes, &raw_op);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);
  OpPtr op(raw_op);

  if (!pinned.empty()) {
    std::string skip;
    const bool runs = PinnedKernelRuns(Explain(op.get(), b.t), pinned, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(runs);
  }
  PlanPtr plan = Plan(op.get(), b.t);
  ASSERT_TRUE(plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  } else {
    ASSERT_FALSE(IsApproximate(kernel)) << "chosen without a pin: " << kernel;
  }
  RecordProperty("kernel", kernel);
  SCOPED_TRACE("ran " + kernel);
  std::printf("[observed] kernel=%s dtypes=%s case=%s\n", kernel.c_str(), d.name.c_str(),
              c.name.c_str());

  b.problem.flash_padded_window = Algorithm(kernel) == "flash";
  const GqaRefOutputs ref = ComputeGqaReference(b.problem, RefInputs(b));
  const std::vector<int64_t> sources = PresentSources(b);

  st = RunPlan(plan.get(), b.t);
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  const double slack = c.subnormal_scales ? std::ldexp(1.0, -10) : 1.0;
  ExpectClose(
      "output", b.t[ATTNRT_GQA_OUTPUT_OUTPUT], d.query, ref.output, [](int64_t) { return true; },
      slack);
  ExpectPresent("present_key", b.t[ATTNRT_GQA_OUTPUT_PRESENT_KEY], b.past_k_bytes, b.new_k_bytes,
                sources, b, d.cache);
  ExpectPresent("present_value", b.t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE], b.past_v_bytes,
                b.new_v_bytes, sources, b, d.cache);
  if (c.qk_output != 0) {
    // Columns [T_b, T) are unspecified (ONNX Runtime leaves them).
    const int64_t per_batch = c.N * c.S * c.T;
    auto valid_column = [&](int64_t i) {
      return i % c.T < ref.valid_keys[static_cast<size_t>(i / per_batch)];
    };
    ExpectClose("output_qk", b.t[ATTNRT_GQA_OUTPUT_OUTPUT_QK], d.query, ref.output_qk,
                valid_column);
  }
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  const std::string& kernel = std::get<0>(info.param);
  std::string name = (kernel.empty() ? "auto" : kernel) + "__" + std::get<1>(info.param).name +
                     "__" + std::get<2>(info.param).name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, GqaBlockQuant,
                         testing::Combine(testing::ValuesIn(KernelParams(ATTNRT_OP_GQA)),
                                          testing::ValuesIn(AllDtypes()),
                                          testing::ValuesIn(Cases())),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaBlockQuant);

}  // namespace
}  // namespace attnrt_test
