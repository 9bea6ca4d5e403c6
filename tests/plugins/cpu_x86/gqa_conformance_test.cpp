// Numerics conformance of every GQA kernel the cpu_x86 plugin registers: one test body, run for
// each kernel (pinned with options.kernel) and for the runtime's own choice ("auto"), over each
// case below, against the float64 reference of tests/common/gqa_reference.cpp (written from ONNX
// Runtime's specification, independent of attnrt). A pinned kernel is skipped when it cannot run on
// this CPU, or when it is not a naive kernel and declines the case with a reason (flash kernels
// decline what ONNX Runtime's flash path declines); the auto runs must pass every case.
//
// Inputs are fresh N(0,1) data from a seed (ATTNRT_TEST_SEED to reproduce; printed on failure and
// recorded as a test property). Outputs are poisoned with NaN before the run, and so are the past
// rows a kernel must not read, so an unwritten output element or a read of a masked row shows.
// Tolerances: output and output_qk 1e-5 absolute (float32 kernel vs float64 reference); present
// K/V exact, or 1e-6 for K rows after RoPE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/gqa_reference.h"
#include "common/test_support.h"

namespace attnrt_test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kOutputTolerance = 1e-5;
constexpr double kRotaryKeyTolerance = 1e-6;

enum Rotary { kNoRotary, kHalfSplit, kInterleaved };
enum Bias { kNoBias, kBias1NST, kBiasB1ST, kBiasBNST, kBias11ST };

struct Case {
  std::string name;
  int64_t B = 1, S = 1, N = 4, Nkv = 2, H = 64;
  int64_t T = 1;
  std::vector<int32_t> seqlens;  // empty: T - 1 for every batch
  int64_t P = -1;                // past buffer rows; < 0: no past inputs
  bool shared_buffer = false;    // present_key/value are the past buffers
  bool present = true;
  bool packed = false;
  bool shared_kv = false;  // L = 0: key/value (B, 0, Nkv H), the past supplies every row
  int32_t causal = 1;
  float scale = 0.0f;
  float softcap = 0.0f;
  int32_t window = -1;
  int32_t smooth = -1;
  int32_t qk_output = 0;
  Rotary rotary = kNoRotary;
  int64_t rotary_dim = 0;  // R; 0 = H
  bool position_ids = false;
  int64_t position_ids_extra = 0;  // position_ids has S + this many columns
  Bias bias = kNoBias;
  bool head_sink = false;
  bool null_workspace = false;  // let the runtime allocate the workspace
};

// gtest prints parameters of failing tests; a case prints as its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// ---- case builders ------------------------------------------------------------------------------
Case Prompt(std::string name, int64_t B, int64_t S, std::vector<int32_t> seqlens = {}) {
  Case c;
  c.name = std::move(name);
  c.B = B;
  c.S = S;
  c.T = S;
  c.seqlens = std::move(seqlens);
  return c;
}

// S = 1 decode; T = max T_b; present is max(T, P) rows or the past buffer itself.
Case Decode(std::string name, int64_t B, int64_t P, std::vector<int32_t> seqlens,
            bool shared_buffer = false) {
  Case c;
  c.name = std::move(name);
  c.B = B;
  c.S = 1;
  c.P = P;
  c.T = *std::max_element(seqlens.begin(), seqlens.end()) + 1;
  c.seqlens = std::move(seqlens);
  c.shared_buffer = shared_buffer;
  return c;
}

// B = 1 chunked prefill: S new tokens after `past_rows` cached ones, in a P-row buffer.
Case Subsequent(std::string name, int64_t S, int64_t past_rows, int64_t P,
                bool shared_buffer = false) {
  Case c;
  c.name = std::move(name);
  c.B = 1;
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
  // Phases, padding, buffers.
  v.push_back(Prompt("prompt_b1_s33", 1, 33));
  v.push_back(Prompt("prompt_b3_right_padding", 3, 16, {15, 10, 3}));
  v.push_back(With(Prompt("prompt_s1", 2, 1), [](Case& c) { c.H = 32; }));
  v.push_back(With(Prompt("prompt_past_buffer_ignored", 2, 8), [](Case& c) { c.P = 12; }));
  v.push_back(With(Prompt("prompt_shared_buffer", 2, 8, {7, 4}), [](Case& c) {
    c.P = 16;
    c.shared_buffer = true;
  }));
  v.push_back(With(Prompt("prompt_no_present", 2, 9, {8, 5}), [](Case& c) { c.present = false; }));
  v.push_back(Decode("decode_ragged", 2, 40, {39, 20}));
  v.push_back(Decode("decode_shared_buffer", 2, 48, {30, 12}, true));
  v.push_back(
      With(Decode("decode_no_present", 2, 24, {23, 9}), [](Case& c) { c.present = false; }));
  v.push_back(Decode("decode_past_longer_than_total", 2, 64, {30, 12}));
  v.push_back(Subsequent("subsequent_prompt", 5, 17, 17));
  v.push_back(Subsequent("subsequent_prompt_shared_buffer", 5, 17, 32, true));
  v.push_back(With(Prompt("subsequent_prompt_without_past", 1, 3), [](Case& c) {
    c.T = 5;
    c.seqlens = {4};
  }));
  v.push_back(With(Decode("null_workspace_decode", 2, 20, {19, 7}),
                   [](Case& c) { c.null_workspace = true; }));
  // Neither past nor present after the first prompt: only the new rows exist, as
  // docs/gqa-semantics.md says, so the workspace sized at plan time suffices whatever T is.
  auto no_cache = [](Case& c) {
    c.T = 9;
    c.seqlens = {8, 5};
    c.present = false;
  };
  v.push_back(With(Prompt("decode_without_past_or_present", 2, 1), no_cache));
  v.push_back(With(Prompt("decode_without_past_or_present_null_workspace", 2, 1), [&](Case& c) {
    no_cache(c);
    c.null_workspace = true;
  }));
  v.push_back(With(Prompt("decode_without_past_or_present_bidirectional", 2, 1), [&](Case& c) {
    no_cache(c);
    c.causal = 0;
  }));
  v.push_back(With(Prompt("subsequent_prompt_without_past_or_present", 1, 3), [](Case& c) {
    c.T = 40;
    c.seqlens = {39};
    c.present = false;
  }));
  // The same with present outputs, bidirectional: a row sees the new rows only, never the present
  // rows [L, T) that nothing wrote (a flash kernel once read them).
  v.push_back(With(Prompt("subsequent_prompt_without_past_bidirectional", 1, 8), [](Case& c) {
    c.T = 16;
    c.seqlens = {15};
    c.causal = 0;
  }));
  // Packed QKV.
  v.push_back(With(Prompt("packed_prompt", 2, 12, {11, 7}), [](Case& c) { c.packed = true; }));
  v.push_back(With(Decode("packed_decode", 2, 20, {19, 7}), [](Case& c) { c.packed = true; }));
  v.push_back(
      With(Subsequent("packed_subsequent", 4, 9, 16, true), [](Case& c) { c.packed = true; }));
  // GQA ratios and head sizes.
  for (int64_t ratio : {1, 2, 4, 8}) {
    auto set = [ratio](Case& c) {
      c.N = 8;
      c.Nkv = 8 / ratio;
      c.H = 32;
    };
    v.push_back(With(Prompt("gqa_ratio_" + std::to_string(ratio) + "_prompt", 2, 10, {9, 6}), set));
    v.push_back(
        With(Decode("gqa_ratio_" + std::to_string(ratio) + "_decode", 2, 24, {23, 9}), set));
  }
  for (int64_t h : {8, 64, 96, 128, 256}) {
    auto set = [h](Case& c) { c.H = h; };
    v.push_back(With(Prompt("head_size_" + std::to_string(h) + "_prompt", 1, 9), set));
    v.push_back(With(Decode("head_size_" + std::to_string(h) + "_decode", 2, 16, {15, 6}), set));
  }
  // Local window (W keys including the query; padded rows use the naive rule).
  v.push_back(With(Prompt("window_prompt", 1, 20), [](Case& c) { c.window = 5; }));
  v.push_back(With(Prompt("window_padded_rows", 2, 12, {11, 5}), [](Case& c) { c.window = 3; }));
  v.push_back(With(Decode("window_decode", 2, 30, {29, 10}), [](Case& c) { c.window = 8; }));
  v.push_back(With(Subsequent("window_subsequent", 5, 17, 17), [](Case& c) { c.window = 4; }));
  v.push_back(With(Prompt("window_zero", 1, 6), [](Case& c) { c.window = 0; }));
  v.push_back(With(Decode("window_one_decode", 2, 16, {15, 6}), [](Case& c) { c.window = 1; }));
  v.push_back(
      With(Decode("window_wider_than_context", 2, 16, {15, 6}), [](Case& c) { c.window = 100; }));
  // Scale and softcap.
  v.push_back(With(Prompt("custom_scale", 2, 10, {9, 6}), [](Case& c) { c.scale = 0.3f; }));
  v.push_back(With(Decode("negative_scale", 2, 16, {15, 6}), [](Case& c) { c.scale = -0.2f; }));
  v.push_back(With(Prompt("softcap_prompt", 2, 10, {9, 6}), [](Case& c) { c.softcap = 1.5f; }));
  v.push_back(With(Decode("softcap_decode", 2, 20, {19, 7}), [](Case& c) { c.softcap = 1.5f; }));
  v.push_back(
      With(Decode("negative_softcap_ignored", 2, 20, {19, 7}), [](Case& c) { c.softcap = -1.0f; }));
  // Attention bias with broadcast.
  v.push_back(With(Prompt("bias_1NST_prompt", 2, 10, {9, 6}), [](Case& c) { c.bias = kBias1NST; }));
  v.push_back(With(Prompt("bias_B1ST_prompt", 2, 10, {9, 6}), [](Case& c) { c.bias = kBiasB1ST; }));
  v.push_back(With(Prompt("bias_BNST_prompt", 2, 10, {9, 6}), [](Case& c) { c.bias = kBiasBNST; }));
  v.push_back(
      With(Decode("bias_1NST_decode", 2, 20, {19, 7}), [](Case& c) { c.bias = kBias1NST; }));
  v.push_back(
      With(Decode("bias_B1ST_decode", 2, 20, {19, 7}), [](Case& c) { c.bias = kBiasB1ST; }));
  v.push_back(
      With(Decode("bias_11ST_decode", 2, 20, {19, 7}), [](Case& c) { c.bias = kBias11ST; }));
  v.push_back(
      With(Subsequent("bias_B1ST_subsequent", 5, 17, 17), [](Case& c) { c.bias = kBiasB1ST; }));
  v.push_back(With(Prompt("bias_after_softcap", 2, 10, {9, 6}), [](Case& c) {
    c.bias = kBias1NST;
    c.softcap = 1.0f;
  }));
  // Sink and smooth softmax.
  v.push_back(With(Prompt("head_sink_prompt", 2, 10, {9, 6}), [](Case& c) { c.head_sink = true; }));
  v.push_back(
      With(Decode("head_sink_decode", 2, 20, {19, 7}), [](Case& c) { c.head_sink = true; }));
  v.push_back(With(Prompt("smooth_softmax_prompt", 2, 10, {9, 6}), [](Case& c) { c.smooth = 1; }));
  v.push_back(With(Decode("smooth_softmax_decode", 2, 20, {19, 7}), [](Case& c) { c.smooth = 1; }));
  v.push_back(With(Decode("head_sink_wins_over_smooth_softmax", 2, 20, {19, 7}), [](Case& c) {
    c.smooth = 1;
    c.head_sink = true;
  }));
  v.push_back(With(Prompt("head_sink_window_zero", 1, 6), [](Case& c) {
    c.head_sink = true;
    c.window = 0;
  }));
  // qk_output (columns < T_b compared).
  v.push_back(With(Prompt("qk_output_1_prompt", 2, 10, {9, 6}), [](Case& c) {
    c.qk_output = 1;
    c.softcap = 1.5f;
    c.bias = kBiasB1ST;
  }));
  v.push_back(With(Prompt("qk_output_2_prompt", 2, 10, {9, 6}), [](Case& c) { c.qk_output = 2; }));
  v.push_back(With(Decode("qk_output_1_decode", 2, 20, {19, 7}), [](Case& c) { c.qk_output = 1; }));
  v.push_back(With(Decode("qk_output_2_decode", 2, 20, {19, 7}), [](Case& c) { c.qk_output = 2; }));
  v.push_back(With(Decode("qk_output_2_window_sink", 2, 20, {19, 7}), [](Case& c) {
    c.qk_output = 2;
    c.window = 5;
    c.head_sink = true;
  }));
  v.push_back(With(Subsequent("qk_output_1_window_subsequent", 5, 17, 17), [](Case& c) {
    c.qk_output = 1;
    c.window = 3;
  }));
  // Rotary.
  v.push_back(With(Prompt("rotary_half_prompt", 2, 12), [](Case& c) { c.rotary = kHalfSplit; }));
  v.push_back(
      With(Prompt("rotary_interleaved_prompt", 2, 12), [](Case& c) { c.rotary = kInterleaved; }));
  v.push_back(
      With(Decode("rotary_half_decode", 2, 20, {19, 7}), [](Case& c) { c.rotary = kHalfSplit; }));
  v.push_back(With(Decode("rotary_interleaved_decode", 2, 20, {19, 7}),
                   [](Case& c) { c.rotary = kInterleaved; }));
  v.push_back(With(Prompt("rotary_partial_half_prompt", 2, 12), [](Case& c) {
    c.rotary = kHalfSplit;
    c.rotary_dim = 32;
  }));
  v.push_back(With(Decode("rotary_partial_interleaved_decode", 2, 20, {19, 7}), [](Case& c) {
    c.rotary = kInterleaved;
    c.rotary_dim = 32;
  }));
  v.push_back(With(Prompt("rotary_position_ids_prompt", 2, 12), [](Case& c) {
    c.rotary = kHalfSplit;
    c.position_ids = true;
  }));
  v.push_back(With(Decode("rotary_position_ids_decode", 2, 20, {19, 7}), [](Case& c) {
    c.rotary = kInterleaved;
    c.position_ids = true;
  }));
  v.push_back(With(Subsequent("rotary_position_ids_subsequent", 5, 17, 17), [](Case& c) {
    c.rotary = kHalfSplit;
    c.position_ids = true;
  }));
  v.push_back(With(Decode("rotary_position_ids_wide", 2, 20, {19, 7}), [](Case& c) {
    c.rotary = kHalfSplit;
    c.position_ids = true;
    c.position_ids_extra = 3;
  }));
  v.push_back(
      With(Subsequent("rotary_partial_interleaved_position_ids_subsequent", 4, 9, 16), [](Case& c) {
        c.rotary = kInterleaved;
        c.rotary_dim = 16;
        c.position_ids = true;
      }));
  v.push_back(With(Prompt("rotary_padded_prompt", 3, 10, {9, 5, 2}),
                   [](Case& c) { c.rotary = kInterleaved; }));
  v.push_back(With(Prompt("rotary_packed_prompt", 2, 10, {9, 6}), [](Case& c) {
    c.rotary = kHalfSplit;
    c.packed = true;
  }));
  v.push_back(With(Decode("rotary_packed_decode", 2, 20, {19, 7}), [](Case& c) {
    c.rotary = kInterleaved;
    c.packed = true;
  }));
  v.push_back(With(Decode("rotary_shared_buffer_decode", 2, 32, {19, 7}, true),
                   [](Case& c) { c.rotary = kHalfSplit; }));
  // causal = 0.
  v.push_back(With(Prompt("noncausal_prompt", 1, 12), [](Case& c) { c.causal = 0; }));
  v.push_back(
      With(Prompt("noncausal_padded_prompt", 2, 12, {11, 5}), [](Case& c) { c.causal = 0; }));
  v.push_back(With(Subsequent("noncausal_subsequent", 5, 17, 17), [](Case& c) { c.causal = 0; }));
  v.push_back(With(Decode("noncausal_decode", 2, 20, {19, 7}), [](Case& c) { c.causal = 0; }));
  // Shared KV (L = 0).
  v.push_back(
      With(Decode("shared_kv_decode", 2, 24, {23, 9}), [](Case& c) { c.shared_kv = true; }));
  v.push_back(
      With(Subsequent("shared_kv_subsequent", 4, 12, 20), [](Case& c) { c.shared_kv = true; }));
  v.push_back(With(Prompt("shared_kv_first_prompt", 1, 6), [](Case& c) {
    c.shared_kv = true;
    c.P = 10;
  }));
  v.push_back(With(Decode("shared_kv_rotary_decode", 2, 24, {23, 9}), [](Case& c) {
    c.shared_kv = true;
    c.rotary = kHalfSplit;
  }));
  v.push_back(With(Decode("shared_kv_shared_buffer_decode", 2, 24, {23, 9}, true),
                   [](Case& c) { c.shared_kv = true; }));
  // Everything at once.
  v.push_back(With(Decode("combo_decode", 2, 40, {39, 20}), [](Case& c) {
    c.window = 8;
    c.softcap = 2.0f;
    c.bias = kBiasB1ST;
    c.head_sink = true;
    c.qk_output = 1;
    c.rotary = kInterleaved;
    c.position_ids = true;
  }));
  v.push_back(With(Prompt("combo_prompt", 3, 12, {11, 7, 2}), [](Case& c) {
    c.window = 4;
    c.softcap = 1.5f;
    c.bias = kBias1NST;
    c.smooth = 1;
    c.qk_output = 2;
    c.rotary = kHalfSplit;
    c.rotary_dim = 32;
    c.N = 8;
    c.Nkv = 2;
  }));
  return v;
}

// ---- kernels under test
// -------------------------------------------------------------------------- Every GQA kernel of
// the cpu_x86 plugin, read from a default runtime when tests are registered.
std::vector<std::string> CpuGqaKernels() {
  std::vector<std::string> names;
  attnrt_runtime* raw = nullptr;
  if (attnrt_runtime_create(nullptr, &raw) != ATTNRT_OK) return names;
  RuntimePtr runtime(raw);
  size_t plugins = 0;
  if (attnrt_runtime_plugin_count(runtime.get(), &plugins) != ATTNRT_OK) return names;
  for (size_t p = 0; p < plugins; ++p) {
    attnrt_plugin_info info{};
    info.struct_size = sizeof(info);
    if (attnrt_runtime_plugin_info(runtime.get(), p, &info) != ATTNRT_OK) continue;
    if (info.name == nullptr || std::string(info.name) != ATTNRT_TEST_CPU_PLUGIN) continue;
    for (size_t k = 0; k < info.num_kernels; ++k) {
      attnrt_kernel_info kernel{};
      kernel.struct_size = sizeof(kernel);
      if (attnrt_runtime_plugin_kernel(runtime.get(), p, k, &kernel) != ATTNRT_OK) continue;
      if (kernel.op_kind == ATTNRT_OP_GQA && kernel.name != nullptr) names.push_back(kernel.name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool IsCpuFeatureReason(const std::string& reason) {
  for (const char* word : {"avx", "cpu", "isa", "fma", "f16c", "xcr0", "feature", "instruction"}) {
    if (ContainsI(reason, word)) return true;
  }
  return false;
}

// ---- one case's tensors and reference problem
// ------------------------------------------------------
struct Built {
  GqaTensors t;
  GqaRefProblem problem;
  GqaRefInputs inputs;
  attnrt_gqa_attributes attributes{};
};

Built Build(const Case& c, std::mt19937_64& rng) {
  Built b;
  GqaTensors& t = b.t;
  const int64_t L = c.shared_kv ? 0 : c.S;
  const int64_t hidden = c.packed ? (c.N + 2 * c.Nkv) * c.H : c.N * c.H;
  std::vector<int32_t> seqlens = c.seqlens;
  if (seqlens.empty()) seqlens.assign(static_cast<size_t>(c.B), static_cast<int32_t>(c.T - 1));
  const bool first_prompt = c.S == c.T;

  t[ATTNRT_GQA_INPUT_QUERY] = F32({c.B, c.S, hidden});
  t[ATTNRT_GQA_INPUT_QUERY].FillNormal(rng);
  if (!c.packed) {
    t[ATTNRT_GQA_INPUT_KEY] = F32({c.B, L, c.Nkv * c.H});
    t[ATTNRT_GQA_INPUT_VALUE] = F32({c.B, L, c.Nkv * c.H});
    t[ATTNRT_GQA_INPUT_KEY].FillNormal(rng);
    t[ATTNRT_GQA_INPUT_VALUE].FillNormal(rng);
  }
  if (c.P >= 0) {
    for (auto i : {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE}) {
      t[i] = F32({c.B, c.Nkv, c.P, c.H});
      t[i].FillNormal(rng);
      // Poison the rows no kernel may read: beyond each batch's valid past (all of it in a first
      // prompt with new rows, whose past content is ignored).
      for (int64_t bb = 0; bb < c.B; ++bb) {
        const int64_t tb = int64_t{seqlens[bb]} + 1;
        const int64_t valid = L == 0 ? tb : (first_prompt ? 0 : tb - c.S);
        for (int64_t kh = 0; kh < c.Nkv; ++kh) {
          float* rows = t[i].f32() + (bb * c.Nkv + kh) * c.P * c.H;
          std::fill(rows + valid * c.H, rows + c.P * c.H, kNaN);
        }
      }
    }
  }
  t[ATTNRT_GQA_INPUT_SEQLENS_K] = I32(seqlens, {c.B});
  t[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = I32({static_cast<int32_t>(c.T)}, {1});

  const int64_t R = c.rotary == kNoRotary ? 0 : (c.rotary_dim > 0 ? c.rotary_dim : c.H);
  const int64_t M = c.T + 16;
  if (c.rotary != kNoRotary) {
    t[ATTNRT_GQA_INPUT_COS_CACHE] = F32({M, R / 2});
    t[ATTNRT_GQA_INPUT_SIN_CACHE] = F32({M, R / 2});
    std::uniform_real_distribution<double> angle(-3.14159, 3.14159);
    for (int64_t i = 0; i < M * R / 2; ++i) {
      const double a = angle(rng);
      t[ATTNRT_GQA_INPUT_COS_CACHE].f32()[i] = static_cast<float>(std::cos(a));
      t[ATTNRT_GQA_INPUT_SIN_CACHE].f32()[i] = static_cast<float>(std::sin(a));
    }
    if (c.position_ids) {
      const int64_t cols = c.S + c.position_ids_extra;
      std::vector<int64_t> ids(static_cast<size_t>(c.B * cols));
      // First prompt: only position_ids[0, 0] counts (base + s for every batch); the rest are
      // other valid positions that must be ignored. Otherwise each entry is used as given.
      std::uniform_int_distribution<int64_t> any(0, first_prompt ? M - c.S : M - 1);
      for (auto& id : ids) id = any(rng);
      if (first_prompt) {
        for (int64_t s = 1; s < c.S; ++s) ids[static_cast<size_t>(s)] = ids[0] + s;
      }
      t[ATTNRT_GQA_INPUT_POSITION_IDS] = I64(ids, {c.B, cols});
    }
  }
  if (c.bias != kNoBias) {
    const int64_t bb = (c.bias == kBias1NST || c.bias == kBias11ST) ? 1 : c.B;
    const int64_t bn = (c.bias == kBiasB1ST || c.bias == kBias11ST) ? 1 : c.N;
    t[ATTNRT_GQA_INPUT_ATTENTION_BIAS] = F32({bb, bn, c.S, c.T});
    t[ATTNRT_GQA_INPUT_ATTENTION_BIAS].FillNormal(rng);
    b.problem.bias_batch = bb;
    b.problem.bias_heads = bn;
  }
  if (c.head_sink) {
    t[ATTNRT_GQA_INPUT_HEAD_SINK] = F32({c.N});
    t[ATTNRT_GQA_INPUT_HEAD_SINK].FillNormal(rng);
  }

  const int64_t present_rows = c.shared_buffer ? c.P : std::max<int64_t>(c.T, c.P);
  t[ATTNRT_GQA_OUTPUT_OUTPUT] = F32({c.B, c.S, c.N * c.H});
  t[ATTNRT_GQA_OUTPUT_OUTPUT].Fill(kNaN);
  if (c.shared_buffer) {
    t[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = t[ATTNRT_GQA_INPUT_PAST_KEY];
    t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = t[ATTNRT_GQA_INPUT_PAST_VALUE];
  } else if (c.present) {
    for (auto o : {ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_OUTPUT_PRESENT_VALUE}) {
      t[o] = F32({c.B, c.Nkv, present_rows, c.H});
      t[o].Fill(kNaN);
    }
  }
  if (c.qk_output != 0) {
    t[ATTNRT_GQA_OUTPUT_OUTPUT_QK] = F32({c.B, c.N, c.S, c.T});
    t[ATTNRT_GQA_OUTPUT_OUTPUT_QK].Fill(kNaN);
  }

  attnrt_gqa_attributes& a = b.attributes;
  a = GqaAttributes(static_cast<int32_t>(c.N), static_cast<int32_t>(c.Nkv));
  a.causal = c.causal;
  a.scale = c.scale;
  a.softcap = c.softcap;
  a.local_window_size = c.window;
  a.do_rotary = c.rotary != kNoRotary ? 1 : 0;
  a.rotary_interleaved = c.rotary == kInterleaved ? 1 : 0;
  a.smooth_softmax = c.smooth;
  a.qk_output = c.qk_output;

  GqaRefProblem& p = b.problem;
  p.batch_size = c.B;
  p.sequence_length = c.S;
  p.kv_sequence_length = L;
  p.num_heads = c.N;
  p.kv_num_heads = c.Nkv;
  p.head_size = c.H;
  p.packed_qkv = c.packed;
  p.has_past = c.P >= 0;
  p.past_length = std::max<int64_t>(c.P, 0);
  p.has_present = c.shared_buffer || c.present;
  p.present_length = present_rows;
  p.present_shares_past = c.shared_buffer;
  p.total_sequence_length = static_cast<int32_t>(c.T);
  p.seqlens_k = seqlens;
  p.causal = c.causal;
  p.scale = c.scale;
  p.softcap = c.softcap;
  p.local_window_size = c.window;
  p.smooth_softmax = c.smooth;
  p.qk_output = c.qk_output;
  p.do_rotary = a.do_rotary;
  p.rotary_interleaved = a.rotary_interleaved;
  p.rotary_cache_length = c.rotary != kNoRotary ? M : 0;
  p.rotary_half_dim = R / 2;
  p.position_ids_length = c.position_ids ? c.S + c.position_ids_extra : 0;
  p.has_head_sink = c.head_sink;

  GqaRefInputs& in = b.inputs;
  auto ptr = [&t](attnrt_gqa_input i) -> const float* {
    return t[i].empty() ? nullptr : t[i].f32();
  };
  in.query = ptr(ATTNRT_GQA_INPUT_QUERY);
  in.key = ptr(ATTNRT_GQA_INPUT_KEY);
  in.value = ptr(ATTNRT_GQA_INPUT_VALUE);
  in.past_key = ptr(ATTNRT_GQA_INPUT_PAST_KEY);
  in.past_value = ptr(ATTNRT_GQA_INPUT_PAST_VALUE);
  in.cos_cache = ptr(ATTNRT_GQA_INPUT_COS_CACHE);
  in.sin_cache = ptr(ATTNRT_GQA_INPUT_SIN_CACHE);
  in.position_ids =
      t[ATTNRT_GQA_INPUT_POSITION_IDS].empty() ? nullptr : t[ATTNRT_GQA_INPUT_POSITION_IDS].i64();
  in.attention_bias = ptr(ATTNRT_GQA_INPUT_ATTENTION_BIAS);
  in.head_sink = ptr(ATTNRT_GQA_INPUT_HEAD_SINK);
  return b;
}

// ---- comparison
// ---------------------------------------------------------------------------------------
std::string Index(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? "," : "") << idx[d];
  os << "]";
  return os.str();
}

// Compares got with want over the elements `selected` accepts. NaN in want means "left untouched
// and poisoned", so got must be NaN there too; elsewhere got must be written and within tolerance.
template <typename Selected>
void ExpectClose(const char* what, const Tensor& got, const std::vector<double>& want,
                 double tolerance, Selected selected) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  int64_t unwritten = 0;
  int64_t bad = 0;
  int64_t first_bad = -1;
  double max_error = 0.0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!selected(i)) continue;
    const double g = got.f32()[i];
    const double w = want[static_cast<size_t>(i)];
    if (std::isnan(w)) {
      if (!std::isnan(g)) {
        ++bad;
        if (first_bad < 0) first_bad = i;
      }
      continue;
    }
    if (std::isnan(g)) {
      ++unwritten;
      if (first_bad < 0) first_bad = i;
      continue;
    }
    const double error = std::fabs(g - w);
    max_error = std::max(max_error, error);
    if (!(error <= tolerance)) {
      ++bad;
      if (first_bad < 0) first_bad = i;
    }
  }
  EXPECT_EQ(unwritten, 0) << what << ": elements left unwritten (NaN); first at "
                          << Index(got.shape(), first_bad);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements off by more than " << tolerance
                    << " (max error " << max_error << "); first at "
                    << Index(got.shape(), first_bad) << ": got " << got.f32()[first_bad]
                    << ", want " << want[static_cast<size_t>(first_bad)];
}

// ---- the test body
// ------------------------------------------------------------------------------------- The
// <algorithm> part of a kernel name "<plugin>.<op>.<algorithm>.<isa>".
std::string Algorithm(const std::string& kernel) {
  const size_t a = kernel.find('.', kernel.find('.') + 1);
  const size_t b = kernel.find('.', a + 1);
  return a == std::string::npos ? "" : kernel.substr(a + 1, b - a - 1);
}

// (kernel to pin, or "" for the runtime's own choice; case)
using Param = std::tuple<std::string, Case>;

class GqaConformance : public testing::TestWithParam<Param> {};

TEST_P(GqaConformance, MatchesReference) {
  const std::string& pinned = std::get<0>(GetParam());
  const Case& c = std::get<1>(GetParam());
  SCOPED_TRACE(SeedTrace());
  SCOPED_TRACE("kernel " + (pinned.empty() ? std::string("(auto)") : pinned) + ", case " + c.name);
  CleanAttnrtEnv env;
  std::mt19937_64 rng(TestSeed());
  Built b = Build(c, rng);

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
    const std::vector<Candidate> candidates = Explain(op.get(), b.t);
    auto it = std::find_if(candidates.begin(), candidates.end(),
                           [&](const Candidate& x) { return x.kernel == pinned; });
    ASSERT_NE(it, candidates.end()) << "explain does not list " << pinned;
    if (it->status == ATTNRT_CANDIDATE_UNAVAILABLE ||
        (it->status == ATTNRT_CANDIDATE_DECLINED && IsCpuFeatureReason(it->reason))) {
      GTEST_SKIP() << pinned << " cannot run on this CPU: " << it->reason;
    }
    // Other algorithms may decline features (e.g. flash, as in ONNX Runtime); the naive kernels are
    // the fallback and must accept every case. The "auto" runs cover every case either way.
    if (it->status == ATTNRT_CANDIDATE_DECLINED && Algorithm(pinned) != "naive") {
      GTEST_SKIP() << pinned << " declines this case: " << it->reason;
    }
    ASSERT_EQ(it->status, ATTNRT_CANDIDATE_SELECTED)
        << pinned << " is " << attnrt_candidate_status_name(it->status) << ": " << it->reason;
  }

  PlanPtr plan = Plan(op.get(), b.t);
  ASSERT_TRUE(plan);
  const std::string kernel = PlanKernel(plan.get());
  if (!pinned.empty()) {
    ASSERT_EQ(kernel, pinned);
  }
  RecordProperty("kernel", kernel);
  SCOPED_TRACE("ran " + kernel);

  // Reference before the run (which may overwrite the shared past buffer), with the padded-row
  // window rule of the kernel's algorithm (docs/gqa-semantics.md).
  b.problem.flash_padded_window = Algorithm(kernel) == "flash";
  const GqaRefOutputs ref = ComputeGqaReference(b.problem, b.inputs);

  if (c.null_workspace) {
    st = attnrt_plan_run(plan.get(), b.t.Inputs(), ATTNRT_GQA_NUM_INPUTS, b.t.Outputs(),
                         ATTNRT_GQA_NUM_OUTPUTS, nullptr, 0, nullptr);
  } else {
    st = RunPlan(plan.get(), b.t);
  }
  ASSERT_EQ(st, ATTNRT_OK) << LastError(st);

  auto all = [](int64_t) { return true; };
  ExpectClose("output", b.t[ATTNRT_GQA_OUTPUT_OUTPUT], ref.output, kOutputTolerance, all);
  if (b.problem.has_present) {
    const double key_tolerance = c.rotary != kNoRotary ? kRotaryKeyTolerance : 0.0;
    ExpectClose("present_key", b.t[ATTNRT_GQA_OUTPUT_PRESENT_KEY], ref.present_key, key_tolerance,
                all);
    ExpectClose("present_value", b.t[ATTNRT_GQA_OUTPUT_PRESENT_VALUE], ref.present_value, 0.0, all);
  }
  if (c.qk_output != 0) {
    // Columns [T_b, T) are unspecified (ONNX Runtime leaves them).
    const int64_t per_batch = c.N * c.S * c.T;
    auto valid_column = [&](int64_t i) { return i % c.T < ref.valid_keys[i / per_batch]; };
    ExpectClose("output_qk", b.t[ATTNRT_GQA_OUTPUT_OUTPUT_QK], ref.output_qk, kOutputTolerance,
                valid_column);
  }
}

// "" (the runtime's own choice) and every cpu_x86 GQA kernel.
std::vector<std::string> KernelParams() {
  std::vector<std::string> params = {""};
  for (auto& k : CpuGqaKernels()) params.push_back(k);
  return params;
}

std::string ParamName(const testing::TestParamInfo<Param>& info) {
  const std::string& kernel = std::get<0>(info.param);
  std::string name = (kernel.empty() ? "auto" : kernel) + "__" + std::get<1>(info.param).name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(CpuPlugin, GqaConformance,
                         testing::Combine(testing::ValuesIn(KernelParams()),
                                          testing::ValuesIn(Cases())),
                         ParamName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GqaConformance);

// The suite above is empty when no kernel is found; this makes that a failure.
TEST(GqaConformanceSetup, CpuPluginRegistersItsGqaKernels) {
  const std::vector<std::string> kernels = CpuGqaKernels();
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), ATTNRT_TEST_CPU_PLUGIN ".gqa.naive.scalar"),
            kernels.end());
  EXPECT_NE(std::find(kernels.begin(), kernels.end(),
                      ATTNRT_TEST_CPU_PLUGIN ".gqa.naive." ATTNRT_TEST_CPU_SIMD),
            kernels.end());
}

// The reference itself, on a case small enough to check by hand: one query, two keys.
TEST(GqaReferenceSelfCheck, TwoKeysByHand) {
  // B=1, S=1 decode over T=2 with N=Nkv=1, H=8: q = e0, k0 = 0, k1 = sqrt(8)*ln(3)*e0, so the
  // scaled scores are 0 and ln 3 and the probabilities 1/4 and 3/4; v0 = 1, v1 = 3 -> 2.5.
  std::vector<float> q(8, 0.0f), k(8, 0.0f), v(8, 3.0f), past_k(8, 0.0f), past_v(8, 1.0f);
  q[0] = 1.0f;
  k[0] = static_cast<float>(std::sqrt(8.0) * std::log(3.0));
  GqaRefProblem p;
  p.sequence_length = 1;
  p.kv_sequence_length = 1;
  p.head_size = 8;
  p.has_past = true;
  p.past_length = 1;
  p.total_sequence_length = 2;
  p.seqlens_k = {1};
  GqaRefInputs in;
  in.query = q.data();
  in.key = k.data();
  in.value = v.data();
  in.past_key = past_k.data();
  in.past_value = past_v.data();
  const GqaRefOutputs out = ComputeGqaReference(p, in);
  for (double o : out.output) EXPECT_NEAR(o, 2.5, 1e-6);
  p.local_window_size = 1;  // only the query's own key
  for (double o : ComputeGqaReference(p, in).output) EXPECT_NEAR(o, 3.0, 1e-12);
  p.local_window_size = 0;  // empty window: zeros
  for (double o : ComputeGqaReference(p, in).output) EXPECT_EQ(o, 0.0);
}

}  // namespace
}  // namespace attnrt_test
