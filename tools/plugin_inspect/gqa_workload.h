// Builds the input and output tensors of one GroupQueryAttention call (positions and shapes as in
// abi/attnrt/ops/gqa.h and ONNX Runtime's schema), fills them with seeded random data of realistic
// scale, and binds them as the pointer arrays attnrt_op_plan / attnrt_plan_run take.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>

#include "attnrt/ops/gqa.h"
#include "dtypes.h"
#include "host_tensor.h"

namespace plugin_inspect {

struct GqaConfig {
  attnrt_gqa_attributes attributes;     // num_heads, kv_num_heads and the rest
  int64_t batch = 1;                    // B
  int64_t seq_len = 1;                  // S: new query tokens (= L, new K/V rows)
  int64_t past_len = 0;                 // P: past buffer rows (capacity with shared_buffer)
  int64_t total_len = 1;                // T: value of total_sequence_length
  int64_t head_size = 0;                // H
  attnrt_dtype dtype = kFloat32;        // T: query, key, value, output, cos/sin, bias, head_sink
  attnrt_dtype cache_dtype = kFloat32;  // T_CACHE: past and present
  bool with_past = false;               // past_key/past_value inputs present (P may be 0)
  bool shared_buffer = false;  // present_key/value are the past tensors (needs max(T,P) == P)
  bool packed_qkv = false;
  bool head_sink = false;
  bool attention_bias = false;
  int64_t rotary_cache_len = 0;  // M rows of cos_cache/sin_cache (R = H); 0 = no rotary caches
};

// Rows of the present buffers: max(T, P).
int64_t present_len(const GqaConfig& config);
// Last dimension of the caches: H, H/2 bytes for a 4-bit cache, or H/32 blocks of 34 (Q8_0) or 18
// (Q4_0) bytes for a PER_BLOCK_32 cache (a head size that is not a multiple of 32 rounds up; the
// runtime rejects it, naming the head size).
int64_t cache_head_size(const attnrt_gqa_attributes& attributes, int64_t head_size);
int64_t cache_head_size(const GqaConfig& config);
// The dtype of a quantized cache: uint8 for 4-bit and PER_BLOCK_32 caches, int8 for the other
// 8-bit ones.
attnrt_dtype quantized_cache_dtype(const attnrt_gqa_attributes& attributes);
// Whether the attributes ask for k_scale/v_scale inputs (PER_TENSOR, PER_CHANNEL; a PER_BLOCK_32
// cache holds its scales in its blocks).
bool uses_scale_inputs(const attnrt_gqa_attributes& attributes);

using TensorRef = std::shared_ptr<HostTensor>;

// One call's tensors, indexed by ATTNRT_GQA_INPUT_* / ATTNRT_GQA_OUTPUT_*; nullptr = absent. An
// output that is the same object as an input (shared past/present) is bound to the same memory.
struct GqaTensors {
  std::array<TensorRef, ATTNRT_GQA_NUM_INPUTS> inputs;
  std::array<TensorRef, ATTNRT_GQA_NUM_OUTPUTS> outputs;
};

// ONNX Runtime's input/output names ("query", "past_key", "output_qk", ...).
const char* gqa_input_name(int index);
const char* gqa_output_name(int index);

// Every tensor the config calls for, zero-filled (allocate = false: descriptors only, data NULL).
// With `reuse`, past/present caches, cos/sin caches, head_sink and k/v scales are taken from it
// instead of allocated (the decode steps of `run` share the prompt's cache and parameters). Throws
// UsageError for inconsistent configs.
GqaTensors make_gqa_tensors(const GqaConfig& config, bool allocate,
                            const GqaTensors* reuse = nullptr);

// Per-step activations: query/key ~ 0.5·N(0,1), value ~ N(0,1) (packed QKV: per slice),
// attention_bias ~ 0.5·N(0,1).
void fill_random_inputs(GqaTensors& tensors, const GqaConfig& config, std::mt19937_64& rng);

// Per-model parameters: head_sink ~ N(0,1); k_scale/v_scale cover ±5 std of K/V at the cache's
// bit width.
void fill_parameters(GqaTensors& tensors, const GqaConfig& config, std::mt19937_64& rng);

// cos/sin caches for RoPE with base `theta`: cache[pos, i] = cos|sin(pos · theta^(-2i/R)).
void fill_rotary_caches(GqaTensors& tensors, double theta);

// seqlens_k[b] = seqlen_k for every batch; total_sequence_length = total.
void set_lengths(GqaTensors& tensors, int32_t seqlen_k, int32_t total);

// NaN-fills (or byte-fills, integer caches) every output that is not also an input.
void poison_outputs(GqaTensors& tensors);

// The tensors for a reference run on the same inputs: read-only inputs are shared, outputs are
// fresh and poisoned, and a buffer that is both input and output (shared past/present) is copied,
// so the reference starts from the same cache contents.
GqaTensors reference_copy(const GqaTensors& tensors);

// Bytes of the distinct tensors (a tensor bound twice counts once) of `tensors`, skipping those
// also in `exclude` (the shared cache of a decode step), only the outputs with `outputs_only`
// (what reference_copy allocates). nullopt when a shape is negative or the sum overflows. Works on
// descriptor-only tensors, so sizes can be checked before anything is allocated.
std::optional<uint64_t> tensors_bytes(const GqaTensors& tensors,
                                      const GqaTensors* exclude = nullptr,
                                      bool outputs_only = false);

// Descriptor and pointer arrays of a GqaTensors, as the runtime takes them. Refers to the tensors;
// keep them alive while the binding is used.
class GqaBinding {
 public:
  explicit GqaBinding(const GqaTensors& tensors);
  GqaBinding(const GqaBinding&) = delete;
  GqaBinding& operator=(const GqaBinding&) = delete;

  const attnrt_tensor* const* inputs() const { return input_ptrs_.data(); }
  std::size_t num_inputs() const { return input_ptrs_.size(); }
  const attnrt_tensor* const* outputs() const { return output_ptrs_.data(); }
  std::size_t num_outputs() const { return output_ptrs_.size(); }

  // Describes every tensor but the host-memory inputs seqlens_k and total_sequence_length as
  // living on `device` (explain --device: descriptors only, never dereferenced).
  void place_on(attnrt_device device);

 private:
  std::array<attnrt_tensor, ATTNRT_GQA_NUM_INPUTS> input_views_{};
  std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_INPUTS> input_ptrs_{};
  std::array<attnrt_tensor, ATTNRT_GQA_NUM_OUTPUTS> output_views_{};
  std::array<const attnrt_tensor*, ATTNRT_GQA_NUM_OUTPUTS> output_ptrs_{};
};

}  // namespace plugin_inspect
