// GroupQueryAttention validation: the attributes at op creation, the gathering of a call's tensors
// and the input and output names. The tensor checks are in gqa_validation_tensors.cpp, the shape
// checks at plan in gqa_validation_shapes.cpp, the value checks at run in gqa_validation_run.cpp.
// The checks and their order follow ONNX Runtime's GroupQueryAttention (1.30, CPU EP: "the
// reference"); item numbers refer to the list in gqa_validation_internal.h. Messages keep ONNX
// Runtime's text where it names the offending value and add the input name, the expected and the
// actual value.
#include "core/ops/gqa_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "core/ops/gqa_validation_internal.h"
#include "core/ops/tensor_checks.h"

namespace attnrt::core::gqa {
namespace detail {
namespace {

constexpr size_t kMinInputs = ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH + 1;

}  // namespace

Status GatherTensors(const attnrt_tensor* const* inputs, size_t num_inputs,
                     const attnrt_tensor* const* outputs, size_t num_outputs, Tensors* t) {
  if (num_inputs < kMinInputs) {
    return InvalidArgument(StrCat(
        "GroupQueryAttention expects at least 7 inputs (query, key, value, past_key, past_value, "
        "seqlens_k, total_sequence_length), got ",
        num_inputs));
  }
  if (num_inputs > ATTNRT_GQA_NUM_INPUTS) {
    return InvalidArgument(StrCat("GroupQueryAttention expects at most ",
                                  static_cast<int>(ATTNRT_GQA_NUM_INPUTS), " inputs, got ",
                                  num_inputs));
  }
  if (num_outputs < 1 || num_outputs > ATTNRT_GQA_NUM_OUTPUTS) {
    return InvalidArgument(
        StrCat("GroupQueryAttention expects 1 to 4 outputs (output, present_key, present_value, "
               "output_qk), got ",
               num_outputs));
  }
  if (inputs == nullptr) return InvalidArgument("GroupQueryAttention: inputs must not be NULL");
  if (outputs == nullptr) return InvalidArgument("GroupQueryAttention: outputs must not be NULL");
  for (size_t i = 0; i < num_inputs; ++i) t->in[i] = inputs[i];
  for (size_t i = 0; i < num_outputs; ++i) t->out[i] = outputs[i];
  return Status::Ok();
}

const char* QuantName(int32_t quant_type) {
  switch (quant_type) {
    case ATTNRT_GQA_QUANT_NONE:
      return "NONE";
    case ATTNRT_GQA_QUANT_PER_TENSOR:
      return "PER_TENSOR";
    case ATTNRT_GQA_QUANT_PER_CHANNEL:
      return "PER_CHANNEL";
    case ATTNRT_GQA_QUANT_PER_BLOCK_32:
      return "PER_BLOCK_32";
    default:
      return "invalid";
  }
}

bool Quantized(const attnrt_gqa_attributes& a) { return a.k_quant_type != ATTNRT_GQA_QUANT_NONE; }

bool BlockQuantized(const attnrt_gqa_attributes& a) {
  return a.k_quant_type == ATTNRT_GQA_QUANT_PER_BLOCK_32;
}

bool ScaleInputsUsed(const attnrt_gqa_attributes& a) { return Quantized(a) && !BlockQuantized(a); }

int64_t CacheRowWidth(const attnrt_gqa_attributes& a, int64_t head_size) {
  if (BlockQuantized(a)) {
    const int64_t block_bytes = a.kv_cache_bit_width == 4 ? ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES
                                                          : ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES;
    return head_size / ATTNRT_GQA_QUANT_BLOCK_ELEMENTS * block_bytes;
  }
  return Quantized(a) && a.kv_cache_bit_width == 4 ? head_size / 2 : head_size;
}

}  // namespace detail

int64_t CacheRowWidth(const attnrt_gqa_attributes& attributes, int64_t head_size) {
  return detail::CacheRowWidth(attributes, head_size);
}

Status HeadSizeOfCacheRow(const attnrt_gqa_attributes& a, int64_t width, const char* name,
                          int64_t* head_size) {
  using detail::BlockQuantized;
  using detail::Quantized;
  if (width <= 0) {
    return InvalidArgument(StrCat(name, ": dimension 3 (head size) must be positive, got ", width));
  }
  if (BlockQuantized(a)) {
    const int64_t block_bytes = a.kv_cache_bit_width == 4 ? ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES
                                                          : ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES;
    if (width % block_bytes != 0) {
      return InvalidArgument(StrCat(name, ": dimension 3 must be whole ",
                                    a.kv_cache_bit_width == 4 ? "Q4_0" : "Q8_0", " blocks of ",
                                    block_bytes, " bytes (32 elements each), got ", width));
    }
    *head_size = width / block_bytes * ATTNRT_GQA_QUANT_BLOCK_ELEMENTS;
    return Status::Ok();
  }
  *head_size = Quantized(a) && a.kv_cache_bit_width == 4 ? width * 2 : width;
  return Status::Ok();
}

namespace detail {

// Attribute values (item 1, the attribute parts of items 2, 4 and 5, and the qk_output
// range of item 17, which needs no tensors and is rejected here rather than at run).
Status CheckAttributeValues(const attnrt_gqa_attributes& a) {
  // Item 1.
  if (a.num_heads <= 0) {
    return InvalidArgument(StrCat("num_heads must be positive, got ", a.num_heads));
  }
  if (a.kv_num_heads <= 0) {
    return InvalidArgument(StrCat("kv_num_heads must be positive, got ", a.kv_num_heads));
  }
  // Non-finite values would turn whole rows into NaN; attnrt rejects them (beyond the reference).
  for (const auto& [name, value] : {std::pair{"scale", a.scale}, std::pair{"softcap", a.softcap},
                                    std::pair{"qk_norm_epsilon", a.qk_norm_epsilon}}) {
    if (!std::isfinite(value)) {
      return InvalidArgument(StrCat(name, " must be a finite number, got ", value));
    }
  }
  if (a.causal != 0 && a.causal != 1) {
    return InvalidArgument(StrCat("causal must be 0 or 1, got ", a.causal));
  }
  if (a.causal == 0 && a.local_window_size != -1) {
    return InvalidArgument(
        StrCat("GroupQueryAttention (CPU): local_window_size must be -1 when causal is 0, got "
               "local_window_size=",
               a.local_window_size));
  }
  if (a.sliding_window_cache != 0 && a.sliding_window_cache != 1) {
    return InvalidArgument(
        StrCat("sliding_window_cache must be 0 or 1, got ", a.sliding_window_cache));
  }
  if (a.sliding_window_cache == 1 && a.local_window_size <= 0) {
    return InvalidArgument(
        StrCat("GroupQueryAttention (CPU): sliding_window_cache=1 requires local_window_size > 0, "
               "got local_window_size=",
               a.local_window_size));
  }
  for (const auto& [name, value] :
       {std::pair{"k_quant_type", a.k_quant_type}, std::pair{"v_quant_type", a.v_quant_type}}) {
    if (value < ATTNRT_GQA_QUANT_NONE || value > ATTNRT_GQA_QUANT_PER_BLOCK_32) {
      return InvalidArgument(StrCat("Invalid KV quantization type: ", name,
                                    " must be 0 (NONE), 1 (PER_TENSOR), 2 (PER_CHANNEL) or 3 "
                                    "(PER_BLOCK_32), got ",
                                    value));
    }
  }
  // Item 2 (attribute part). Only k_quant_type enables quantization; v_quant_type alone is ignored.
  if (Quantized(a)) {
    if (a.k_quant_type != a.v_quant_type) {
      return InvalidArgument(StrCat(
          "CPU GroupQueryAttention requires k_quant_type == v_quant_type, got different types: "
          "k_quant_type=",
          QuantName(a.k_quant_type), " v_quant_type=", QuantName(a.v_quant_type)));
    }
    if (a.kv_cache_bit_width != 4 && a.kv_cache_bit_width != 8) {
      return InvalidArgument(
          StrCat("kv_cache_bit_width must be 4 or 8 when quantization is enabled, got ",
                 a.kv_cache_bit_width));
    }
  } else if (a.kv_cache_bit_width != 0) {
    return InvalidArgument(StrCat(
        "kv_cache_bit_width must be 0 when quantization is disabled, got ", a.kv_cache_bit_width));
  }
  // Item 4 (needs no shapes, so it is checked at creation as well).
  if (a.num_heads % a.kv_num_heads != 0) {
    return InvalidArgument(StrCat("num_heads must be a multiple of kv_num_heads, got num_heads=",
                                  a.num_heads, " kv_num_heads=", a.kv_num_heads));
  }
  // Item 5 (kv_cache_bit_width in {0, 4, 8}) cannot fail after item 2.
  // Item 17, value range.
  if (a.qk_output < ATTNRT_GQA_QK_OUTPUT_NONE || a.qk_output > ATTNRT_GQA_QK_OUTPUT_AFTER_SOFTMAX) {
    return InvalidArgument(StrCat("qk_output attribute received unsupported value ", a.qk_output,
                                  ", expected 0 (none), 1 (before softmax) or 2 (after softmax)"));
  }
  return Status::Ok();
}

}  // namespace detail

using namespace detail;

Status ValidateAttributes(const void* attributes, attnrt_gqa_attributes* out) {
  try {
    if (attributes == nullptr) {
      return InvalidArgument("GroupQueryAttention: attributes must not be NULL");
    }
    if (out == nullptr) return InvalidArgument("GroupQueryAttention: out must not be NULL");
    size_t struct_size;
    std::memcpy(&struct_size, attributes, sizeof struct_size);
    if (struct_size < ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE) {
      return AbiMismatch(StrCat("attnrt_gqa_attributes struct_size must be at least ",
                                ATTNRT_GQA_ATTRIBUTES_STRUCT_SIZE, " (ABI ",
                                ATTNRT_ABI_VERSION_MAJOR, ".", ATTNRT_ABI_VERSION_MINOR, "), got ",
                                struct_size));
    }
    // Fields appended by a newer minor version lie beyond the last field and are ignored; nothing
    // past the caller's struct_size is read (ATTNRT_STRUCT_SIZE leaves out the tail padding).
    attnrt_gqa_attributes a{};
    std::memcpy(&a, attributes, std::min(struct_size, sizeof a));
    a.struct_size = sizeof(attnrt_gqa_attributes);
    ATTNRT_RETURN_IF_ERROR(CheckAttributeValues(a));
    // Normalized so that kernels can test flags plainly: the reference enables these only with
    // the value 1, disables the window with any negative value and ignores v_quant_type when
    // k_quant_type is NONE.
    a.do_rotary = a.do_rotary == 1;
    a.rotary_interleaved = a.rotary_interleaved == 1;
    a.smooth_softmax = a.smooth_softmax == 1;
    if (a.local_window_size < 0) a.local_window_size = -1;
    if (a.k_quant_type == ATTNRT_GQA_QUANT_NONE) a.v_quant_type = ATTNRT_GQA_QUANT_NONE;
    *out = a;
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return ValidationException("GroupQueryAttention", "ValidateAttributes", /*out_of_memory=*/true);
  } catch (...) {
    return ValidationException("GroupQueryAttention", "ValidateAttributes",
                               /*out_of_memory=*/false);
  }
}

const char* InputName(size_t index) {
  return index < ATTNRT_GQA_NUM_INPUTS ? kInputNames[index] : "?";
}

const char* OutputName(size_t index) {
  return index < ATTNRT_GQA_NUM_OUTPUTS ? kOutputNames[index] : "?";
}

}  // namespace attnrt::core::gqa
