// GroupQueryAttention validation at run: the tensors the plan saw, data pointers and aliasing
// between outputs and inputs, then the values (total_sequence_length, the phase, every
// seqlens_k[b], rotary positions; items 8-9, 12, 13, 16, 18 and 19 of gqa_validation_internal.h),
// resolved into attnrt_gqa_args.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/ops/gqa_validation.h"
#include "core/ops/gqa_validation_internal.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::gqa {
namespace detail {
namespace {

// The tensors the plan saw must still be there (and no others that change the problem): the
// runtime compares shapes and dtypes, this only guards against reading through a NULL descriptor.
Status CheckPresenceMatchesPlan(const Tensors& t, const attnrt_gqa_problem& p) {
  const bool quantized = ScaleInputsUsed(p.attributes);
  const bool expect_in[ATTNRT_GQA_NUM_INPUTS] = {true,
                                                 !p.packed_qkv,
                                                 !p.packed_qkv,
                                                 p.has_past,
                                                 p.has_past,
                                                 true,
                                                 true,
                                                 p.has_rotary_cache,
                                                 p.has_rotary_cache,
                                                 p.has_position_ids,
                                                 p.has_attention_bias,
                                                 p.has_head_sink,
                                                 quantized,
                                                 quantized,
                                                 false,
                                                 false};
  const bool expect_out[ATTNRT_GQA_NUM_OUTPUTS] = {true, p.has_present, p.has_present,
                                                   p.has_output_qk};
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    // k_scale/v_scale may be given without quantization (ignored, as at plan); a PER_BLOCK_32
    // cache rejected them at plan.
    if (!quantized && (i == ATTNRT_GQA_INPUT_K_SCALE || i == ATTNRT_GQA_INPUT_V_SCALE)) continue;
    if (expect_in[i] != (t.in[i] != nullptr)) {
      return PlanMismatch(StrCat("Input '", kInputNames[i], "' was ",
                                 expect_in[i] ? "present" : "absent",
                                 " when the plan was made, got ", PresenceWord(t.in[i])));
    }
  }
  for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
    if (expect_out[i] != (t.out[i] != nullptr)) {
      return PlanMismatch(StrCat("Output '", kOutputNames[i], "' was ",
                                 expect_out[i] ? "present" : "absent",
                                 " when the plan was made, got ", PresenceWord(t.out[i])));
    }
  }
  return Status::Ok();
}

// Outputs may not overlap inputs or each other, except present_key/value that are exactly
// past_key/value's memory (same start; same length is checked with the present length).
Status CheckAliasing(const Tensors& t, const ByteRange (&in)[ATTNRT_GQA_NUM_INPUTS],
                     const ByteRange (&out)[ATTNRT_GQA_NUM_OUTPUTS], bool* shares_past) {
  auto same_start = [&](int o, int i) {
    return t.out[o] != nullptr && t.in[i] != nullptr && !in[i].empty() &&
           in[i].begin == out[o].begin;
  };
  const bool share_k = same_start(ATTNRT_GQA_OUTPUT_PRESENT_KEY, ATTNRT_GQA_INPUT_PAST_KEY);
  const bool share_v = same_start(ATTNRT_GQA_OUTPUT_PRESENT_VALUE, ATTNRT_GQA_INPUT_PAST_VALUE);
  // In-place append needs both caches in place; say which one is not, and whether it overlaps.
  if (share_k != share_v) {
    const int o = share_k ? ATTNRT_GQA_OUTPUT_PRESENT_VALUE : ATTNRT_GQA_OUTPUT_PRESENT_KEY;
    const int i = share_k ? ATTNRT_GQA_INPUT_PAST_VALUE : ATTNRT_GQA_INPUT_PAST_KEY;
    const char* shared = share_k ? "present_key shares past_key's"
                                 : "present_value shares "
                                   "past_value's";
    const bool overlaps = t.out[o] != nullptr && t.in[i] != nullptr && Overlaps(out[o], in[i]);
    return InvalidArgument(StrCat(shared, " memory, so Output '", kOutputNames[o],
                                  "' must start exactly at input '", kInputNames[i], "', but it ",
                                  overlaps ? "overlaps it at another address" : "does not"));
  }
  auto device_type = [](const attnrt_tensor* x) { return x->device.device_type; };
  for (int o = 0; o < ATTNRT_GQA_NUM_OUTPUTS; ++o) {
    if (t.out[o] == nullptr) continue;
    for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
      if (t.in[i] == nullptr || device_type(t.in[i]) != device_type(t.out[o])) continue;
      if (share_k && o == ATTNRT_GQA_OUTPUT_PRESENT_KEY && i == ATTNRT_GQA_INPUT_PAST_KEY) continue;
      if (share_v && o == ATTNRT_GQA_OUTPUT_PRESENT_VALUE && i == ATTNRT_GQA_INPUT_PAST_VALUE) {
        continue;
      }
      if (Overlaps(out[o], in[i])) {
        return InvalidArgument(StrCat(
            "Output '", kOutputNames[o], "' overlaps input '", kInputNames[i],
            "' in memory, expected disjoint buffers (only present_key/present_value may be exactly "
            "past_key/past_value's memory)"));
      }
    }
    for (int o2 = o + 1; o2 < ATTNRT_GQA_NUM_OUTPUTS; ++o2) {
      if (t.out[o2] == nullptr || device_type(t.out[o2]) != device_type(t.out[o])) continue;
      if (Overlaps(out[o], out[o2])) {
        return InvalidArgument(StrCat("Output '", kOutputNames[o], "' overlaps output '",
                                      kOutputNames[o2], "' in memory, expected disjoint buffers"));
      }
    }
  }
  *shares_past = share_k;
  return Status::Ok();
}

Status ValidateRunImpl(const attnrt_gqa_problem& p, const attnrt_tensor* const* inputs,
                       size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                       attnrt_gqa_args* out) {
  if (out == nullptr) return InvalidArgument("GroupQueryAttention: args must not be NULL");
  if (p.struct_size != sizeof(attnrt_gqa_problem)) {
    return InvalidArgument(StrCat("GroupQueryAttention: problem.struct_size must be ",
                                  sizeof(attnrt_gqa_problem), ", got ", p.struct_size));
  }
  Tensors t;
  ATTNRT_RETURN_IF_ERROR(GatherTensors(inputs, num_inputs, outputs, num_outputs, &t));
  ATTNRT_RETURN_IF_ERROR(CheckPresenceMatchesPlan(t, p));

  ByteRange in_range[ATTNRT_GQA_NUM_INPUTS];
  ByteRange out_range[ATTNRT_GQA_NUM_OUTPUTS];
  const void* in_ptr[ATTNRT_GQA_NUM_INPUTS] = {};
  void* out_ptr[ATTNRT_GQA_NUM_OUTPUTS] = {};
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    if (t.in[i] == nullptr) continue;
    ATTNRT_RETURN_IF_ERROR(ResolveRange(*t.in[i], kInputNames[i], &in_range[i]));
    if (t.in[i]->data != nullptr) {
      in_ptr[i] = static_cast<const char*>(t.in[i]->data) + t.in[i]->byte_offset;
    }
  }
  for (int i = 0; i < ATTNRT_GQA_NUM_OUTPUTS; ++i) {
    if (t.out[i] == nullptr) continue;
    ATTNRT_RETURN_IF_ERROR(ResolveRange(*t.out[i], kOutputNames[i], &out_range[i]));
    if (t.out[i]->data != nullptr) {
      out_ptr[i] = static_cast<char*>(t.out[i]->data) + t.out[i]->byte_offset;
    }
  }
  bool shares_past = false;
  ATTNRT_RETURN_IF_ERROR(CheckAliasing(t, in_range, out_range, &shares_past));

  const attnrt_gqa_attributes& a = p.attributes;
  const int64_t B = p.batch_size;
  const int64_t S = p.sequence_length;
  const int64_t L = p.kv_sequence_length;
  const int64_t P = p.past_sequence_length;
  const bool windowed = a.sliding_window_cache == 1;
  const void* seqlens = in_ptr[ATTNRT_GQA_INPUT_SEQLENS_K];

  // Item 9.
  const int64_t T = ReadInt32(in_ptr[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH], 0);
  if (T <= 0) {
    return InvalidArgument(StrCat("total_sequence_length must be positive, got ", T));
  }
  // Item 10: present length max(T, P) (item 11: the window capacity P, fixed at plan). A present
  // buffer that is past's memory keeps past's length, so T may not exceed it.
  int64_t present_len = std::max(T, P);
  if (p.has_present && !windowed) {
    const int64_t actual = p.present_sequence_length;
    if (shares_past) {
      if (actual != P) {
        return InvalidArgument(StrCat(
            "present_key shares memory with past_key, so its dimension 2 must equal past_key's, "
            "got ",
            actual, " expected ", P));
      }
      if (T > P) {
        return InvalidArgument(
            StrCat("total_sequence_length must not exceed the shared past/present buffer length ",
                   P, " when present_key shares memory with past_key, got ", T));
      }
    } else if (actual != present_len) {
      return InvalidArgument(StrCat(
          "present_key dimension 2 must be max(total_sequence_length, past_sequence_length) = ",
          present_len, ", got ", actual));
    }
  }
  if (p.has_present) present_len = p.present_sequence_length;

  // Item 12: rotary cache bounds.
  if (p.has_rotary_cache) {
    for (int i : {ATTNRT_GQA_INPUT_COS_CACHE, ATTNRT_GQA_INPUT_SIN_CACHE}) {
      if (t.in[i]->shape[0] < T) {
        return InvalidArgument(StrCat("Input '", kInputNames[i],
                                      "' dimension 0 shall not be less than total_sequence_length, "
                                      "got ",
                                      t.in[i]->shape[0], " expected >= ", T));
      }
    }
    const int64_t M = p.rotary_cache_length;
    for (int64_t b = 0; b < B; ++b) {
      const int32_t v = ReadInt32(seqlens, b);
      if (v < 0 || v >= M) {
        return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v,
                                      " is out of range for rotary cache dimension 0 (", M, ")"));
      }
    }
  }

  // Item 13: phase.
  int32_t phase;
  if (S > 1 && S != T) {
    if (B != 1) {
      return InvalidArgument(
          StrCat("batch_size must be 1 when sequence_length > 1 and past context is given. Got "
                 "batch_size=",
                 B, " sequence_length=", S, " total_sequence_length=", T));
    }
    phase = ATTNRT_GQA_PHASE_SUBSEQUENT_PROMPT;
  } else if (S == T) {
    phase = ATTNRT_GQA_PHASE_FIRST_PROMPT;
  } else if (S == 1) {
    phase = ATTNRT_GQA_PHASE_DECODE;
  } else {
    return InvalidArgument(
        StrCat("sequence_length shall be 1 when it is not prompt (sequence_length != "
               "total_sequence_length), got sequence_length=",
               S, " total_sequence_length=", T));
  }
  const bool first_prompt = phase == ATTNRT_GQA_PHASE_FIRST_PROMPT;

  // Item 14 (value part).
  if (p.has_attention_bias && p.attention_bias_total_length != T) {
    return InvalidArgument(
        StrCat("Input 'attention_bias' dimension 3 should match total_sequence_length, got ",
               p.attention_bias_total_length, " expected ", T));
  }

  // Item 16: per-batch lengths. A windowed cache keeps seqlens_k absolute, so only the lower
  // bounds apply to it (its cache-relative lengths are planned by the kernel).
  for (int64_t b = 0; b < B; ++b) {
    const int64_t v = ReadInt32(seqlens, b);
    if (v < 0 || (!windowed && v >= present_len)) {
      return InvalidArgument(
          StrCat("seqlens_k[", b, "] = ", v, " is out of range [0, ", present_len, ")"));
    }
    if ((windowed || !first_prompt) && v + 1 < S) {
      return InvalidArgument(
          StrCat("seqlens_k[", b, "] = ", v, " is too small for sequence_length ", S));
    }
    if (!windowed && p.has_past && L != 0 && !first_prompt && v + 1 - S > P) {
      return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v, " requires ", v + 1 - S,
                                    " past KV rows, which exceeds the past buffer sequence length ",
                                    P, "."));
    }
    // attnrt rule beyond the reference: attention_bias and output_qk have T columns, and a kernel
    // touches columns [0, T_b) of them, so T_b <= T must hold (only possible to break when P > T).
    if (p.has_attention_bias && v >= T) {
      return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v,
                                    " exceeds the attention_bias sequence dimension ", T,
                                    " (total_sequence_length), expected < ", T));
    }
    if (p.has_output_qk && v >= T) {
      return InvalidArgument(StrCat("seqlens_k[", b, "] = ", v,
                                    " exceeds the output_qk sequence dimension ", T,
                                    " (total_sequence_length), expected < ", T));
    }
  }

  // Item 17 (value part).
  if (p.has_output_qk) {
    const int64_t d3 = t.out[ATTNRT_GQA_OUTPUT_OUTPUT_QK]->shape[3];
    if (d3 != T) {
      return InvalidArgument(
          StrCat("Output 'output_qk' dimension 3 should match total_sequence_length, got ", d3,
                 " expected ", T));
    }
  }

  // Item 18: rotary positions. Without position_ids outside the first prompt the positions are
  // P_b + s <= seqlens_k[b], already inside [0, M) by items 12 and 16.
  if (a.do_rotary == 1) {
    const int64_t M = p.rotary_cache_length;
    // Only host memory is read here: position_ids on a CUDA device are never dereferenced by the
    // core (the CUDA kernels clamp each position into [0, M) instead).
    const int64_t* positions =
        p.device_type == ATTNRT_DEVICE_CPU
            ? static_cast<const int64_t*>(in_ptr[ATTNRT_GQA_INPUT_POSITION_IDS])
            : nullptr;
    if (first_prompt) {
      const int64_t pos0 = positions != nullptr && B > 0 ? ReadInt64(positions, 0) : 0;
      if (pos0 < 0 || pos0 > M - S) {
        return InvalidArgument(
            StrCat("position_ids value ", pos0, " at index 0 is out of range [0, ", M - S,
                   "] (first prompt: the ", S, " positions starting there must lie in the rotary ",
                   "cache dimension 0 range [0, ", M, "))"));
      }
    } else if (positions != nullptr) {
      const int64_t row = p.position_ids_length;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t s = 0; s < S; ++s) {
          const int64_t index = b * row + s;
          const int64_t pos = ReadInt64(positions, index);
          if (pos < 0 || pos >= M) {
            return InvalidArgument(StrCat("position_ids value ", pos, " at index ", index,
                                          " is out of range [0, ", M, ")"));
          }
        }
      }
    }
  }

  // Item 19: shared KV (no new rows): the past supplies every key. T_b <= P then follows from
  // item 16, since present_len = max(T, P) = P.
  if (p.has_past && L == 0 && T > P) {
    return InvalidArgument(
        StrCat("total_sequence_length must not exceed past_sequence_length with shared KV "
               "(kv_sequence_length 0), got ",
               T, " expected <= ", P));
  }

  attnrt_gqa_args args;
  std::memset(&args, 0, sizeof args);
  args.struct_size = sizeof(attnrt_gqa_args);
  args.problem = &p;
  args.total_sequence_length = static_cast<int32_t>(T);
  args.phase = phase;
  args.present_shares_past = shares_past;
  args.query = in_ptr[ATTNRT_GQA_INPUT_QUERY];
  args.key = in_ptr[ATTNRT_GQA_INPUT_KEY];
  args.value = in_ptr[ATTNRT_GQA_INPUT_VALUE];
  args.past_key = in_ptr[ATTNRT_GQA_INPUT_PAST_KEY];
  args.past_value = in_ptr[ATTNRT_GQA_INPUT_PAST_VALUE];
  args.seqlens_k = static_cast<const int32_t*>(seqlens);
  args.cos_cache = in_ptr[ATTNRT_GQA_INPUT_COS_CACHE];
  args.sin_cache = in_ptr[ATTNRT_GQA_INPUT_SIN_CACHE];
  args.position_ids = static_cast<const int64_t*>(in_ptr[ATTNRT_GQA_INPUT_POSITION_IDS]);
  args.attention_bias = in_ptr[ATTNRT_GQA_INPUT_ATTENTION_BIAS];
  args.head_sink = in_ptr[ATTNRT_GQA_INPUT_HEAD_SINK];
  if (ScaleInputsUsed(a)) {
    args.k_scale = static_cast<const float*>(in_ptr[ATTNRT_GQA_INPUT_K_SCALE]);
    args.v_scale = static_cast<const float*>(in_ptr[ATTNRT_GQA_INPUT_V_SCALE]);
  }
  args.output = out_ptr[ATTNRT_GQA_OUTPUT_OUTPUT];
  args.present_key = out_ptr[ATTNRT_GQA_OUTPUT_PRESENT_KEY];
  args.present_value = out_ptr[ATTNRT_GQA_OUTPUT_PRESENT_VALUE];
  args.output_qk = out_ptr[ATTNRT_GQA_OUTPUT_OUTPUT_QK];
  *out = args;
  return Status::Ok();
}

}  // namespace
}  // namespace detail

using namespace detail;

Status ValidateRun(const attnrt_gqa_problem& problem, const attnrt_tensor* const* inputs,
                   size_t num_inputs, const attnrt_tensor* const* outputs, size_t num_outputs,
                   attnrt_gqa_args* out) {
  return GuardValidation("GroupQueryAttention", "ValidateRun", [&] {
    return ValidateRunImpl(problem, inputs, num_inputs, outputs, num_outputs, out);
  });
}

}  // namespace attnrt::core::gqa
