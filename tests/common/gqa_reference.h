// Float64 reference of ONNX Runtime's com.microsoft.GroupQueryAttention (non-quantized CPU path),
// written from ONNX Runtime's specification of the operator alone (its operator documentation and
// CPU implementation; docs/gqa-semantics.md): phases, causal mask, local window of W keys including
// the query with the naive rule for padded rows, the score pipeline in its exact order, present K/V
// and rotary embedding.
//
// It knows nothing of attnrt: plain arrays in, float64 arrays out. Inputs are float32, as the
// kernels under test see them; every computation is done in double.
#pragma once

#include <cstdint>
#include <vector>

namespace attnrt_test {

// Shapes, run-time values and attributes of one GQA call. Notation of gqa-semantics.md:
// B batch, S new query tokens, L new key/value rows (0 = shared KV), N query heads, Nkv kv heads,
// H head size, P past buffer rows, T total_sequence_length, T_b = seqlens_k[b] + 1.
struct GqaRefProblem {
  int64_t batch_size = 1;          // B
  int64_t sequence_length = 1;     // S
  int64_t kv_sequence_length = 1;  // L (ignored with packed QKV, where L = S)
  int64_t num_heads = 1;           // N
  int64_t kv_num_heads = 1;        // Nkv
  int64_t head_size = 8;           // H
  bool packed_qkv = false;         // query is (B, S, (N + 2 Nkv) H), key/value absent
  bool has_past = false;
  int64_t past_length = 0;  // P: rows of past_key/past_value (B, Nkv, P, H)
  bool has_present = false;
  int64_t present_length = 0;         // rows of present_key/present_value (B, Nkv, rows, H)
  bool present_shares_past = false;   // present is the past buffer (then present_length == P)
  int32_t total_sequence_length = 1;  // T
  std::vector<int32_t> seqlens_k;     // B values, T_b - 1

  // Attributes (ONNX Runtime's; only the values that enable a feature matter).
  int32_t causal = 1;
  float scale = 0.0f;  // 0 => 1/sqrt(H)
  float softcap = 0.0f;
  int32_t local_window_size = -1;
  int32_t smooth_softmax = -1;
  int32_t qk_output = 0;  // 0 none, 1 scores before softmax, 2 probabilities
  int32_t do_rotary = 0;
  int32_t rotary_interleaved = 0;

  int64_t rotary_cache_length = 0;  // M: rows of cos_cache / sin_cache
  int64_t rotary_half_dim = 0;      // cos_cache.shape[1] = R / 2
  int64_t position_ids_length = 0;  // position_ids.shape[1]; 0 = absent
  int64_t bias_batch = 0;           // attention_bias.shape[0] (B or 1); 0 = absent
  int64_t bias_heads = 0;           // attention_bias.shape[1] (N or 1)
  bool has_head_sink = false;

  // Padded query rows (s >= T_b, first prompt) with a local window see
  // [max(0, T_b - W), T_b) on ONNX Runtime's naive path (false) and [max(0, s + 1 - W), T_b) on its
  // flash path (true). Valid rows are the same on both.
  bool flash_padded_window = false;
};

// Borrowed float32/int64 input arrays, row-major in ONNX Runtime's input shapes.
struct GqaRefInputs {
  const float* query = nullptr;
  const float* key = nullptr;
  const float* value = nullptr;
  const float* past_key = nullptr;  // with present_shares_past: the buffer's content before the run
  const float* past_value = nullptr;
  const float* cos_cache = nullptr;
  const float* sin_cache = nullptr;
  const int64_t* position_ids = nullptr;
  const float* attention_bias = nullptr;
  const float* head_sink = nullptr;
};

struct GqaRefOutputs {
  std::vector<double> output;         // (B, S, N H)
  std::vector<double> present_key;    // (B, Nkv, present_length, H); empty without present
  std::vector<double> present_value;  // as present_key
  std::vector<double> output_qk;    // (B, N, S, T); empty with qk_output == 0; columns >= T_b are 0
  std::vector<int64_t> valid_keys;  // T_b per batch
};

// Computes every output. The caller guarantees a valid problem (the shapes and values that
// attnrt_op_plan / attnrt_plan_run accept).
GqaRefOutputs ComputeGqaReference(const GqaRefProblem& problem, const GqaRefInputs& inputs);

}  // namespace attnrt_test
