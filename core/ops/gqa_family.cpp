// GroupQueryAttention as an op family: attributes and shapes are validated by gqa_validation.cpp,
// in the order of ONNX Runtime's com.microsoft.GroupQueryAttention (its CPU validation order).
#include <cstdio>
#include <exception>

#include "attnrt/ops/gqa.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"
#include "core/ops/gqa_validation.h"
#include "core/ops/op_family.h"
#include "core/ops/paged_gqa_family.h"
#include "core/ops/paged_gqa_validation.h"
#include "core/ops/paged_gqa_varlen_validation.h"
#include "core/ops/sparse_mla_family.h"
#include "core/plugin_call.h"

namespace attnrt::core {
namespace {

class GqaProblem final : public Problem {
 public:
  explicit GqaProblem(const attnrt_gqa_problem& problem) : problem_(problem) {}

  const void* abi() const override { return &problem_; }
  int32_t device_type() const override { return problem_.device_type; }
  AbiNeed abi_need() const override {
    return NewerNeed(KvQuantNeed(problem_.attributes), CacheDtypeNeed(problem_.cache_dtype));
  }

  Status Run(const KernelRecord& kernel, const TensorList& inputs, const TensorList& outputs,
             void* workspace, size_t workspace_size, void* stream) const override {
    attnrt_gqa_args args{};
    ATTNRT_RETURN_IF_ERROR(gqa::ValidateRun(problem_, inputs.tensors, inputs.count, outputs.tensors,
                                            outputs.count, &args));
    // An empty batch (B = 0) has nothing to read or write; kernels never see one (their tensors
    // may all be NULL).
    if (problem_.batch_size == 0) return Status::Ok();
    args.workspace = workspace;
    args.workspace_size = workspace_size;
    args.stream = stream;
    return RunKernel(kernel, &args);
  }

 private:
  attnrt_gqa_problem problem_;
};

class GqaFamily final : public OpFamily {
 public:
  explicit GqaFamily(const attnrt_gqa_attributes& attributes) : attributes_(attributes) {}

  int32_t kind() const override { return ATTNRT_OP_GQA; }
  size_t max_inputs() const override { return ATTNRT_GQA_NUM_INPUTS; }
  size_t max_outputs() const override { return ATTNRT_GQA_NUM_OUTPUTS; }
  const char* input_name(size_t index) const override { return gqa::InputName(index); }
  const char* output_name(size_t index) const override { return gqa::OutputName(index); }

  std::span<const size_t> HostReadInputs() const override {
    static constexpr size_t kInputs[] = {ATTNRT_GQA_INPUT_SEQLENS_K,
                                         ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH,
                                         ATTNRT_GQA_INPUT_POSITION_IDS};
    return kInputs;
  }
  // Written when present_key/present_value are the same memory (in place).
  std::span<const size_t> WrittenInputs() const override {
    static constexpr size_t kInputs[] = {ATTNRT_GQA_INPUT_PAST_KEY, ATTNRT_GQA_INPUT_PAST_VALUE};
    return kInputs;
  }

  Status Prepare(const TensorList& inputs, const TensorList& outputs,
                 std::unique_ptr<Problem>* out) const override {
    attnrt_gqa_problem problem{};
    ATTNRT_RETURN_IF_ERROR(gqa::ValidateShapes(attributes_, inputs.tensors, inputs.count,
                                               outputs.tensors, outputs.count, &problem));
    *out = std::make_unique<GqaProblem>(problem);
    return Status::Ok();
  }

  // A decode whose present output is a new buffer one step longer than the past (ONNX Runtime's
  // default I/O binding): the sequence dimension of past and present grows every step. A
  // sliding_window_cache=1 present has the window's fixed length.
  std::vector<DimRef> GrowingDims(const TensorList& inputs,
                                  const TensorList& outputs) const override {
    const attnrt_tensor* past = inputs.at(ATTNRT_GQA_INPUT_PAST_KEY);
    const attnrt_tensor* present = outputs.at(ATTNRT_GQA_OUTPUT_PRESENT_KEY);
    if (attributes_.sliding_window_cache == 1 || past == nullptr || present == nullptr ||
        past->ndim != 4 || present->ndim != 4 || present->shape[2] <= past->shape[2]) {
      return {};
    }
    return {{false, ATTNRT_GQA_INPUT_PAST_KEY, 2},
            {false, ATTNRT_GQA_INPUT_PAST_VALUE, 2},
            {true, ATTNRT_GQA_OUTPUT_PRESENT_KEY, 2},
            {true, ATTNRT_GQA_OUTPUT_PRESENT_VALUE, 2}};
  }

 private:
  attnrt_gqa_attributes attributes_;
};

}  // namespace

Status CreateOpFamily(int32_t kind, const void* attributes, std::unique_ptr<OpFamily>* out) {
  switch (kind) {
    case ATTNRT_OP_GQA: {
      attnrt_gqa_attributes validated{};
      ATTNRT_RETURN_IF_ERROR(gqa::ValidateAttributes(attributes, &validated));
      *out = std::make_unique<GqaFamily>(validated);
      return Status::Ok();
    }
    case ATTNRT_OP_PAGED_GQA:
      return CreatePagedGqaFamily(attributes, out);
    case ATTNRT_OP_PAGED_GQA_VARLEN:
      return CreatePagedGqaVarlenFamily(attributes, out);
    case ATTNRT_OP_SPARSE_MLA:
    case ATTNRT_OP_SPARSE_MLA_METADATA:
      return CreateSparseMlaFamily(kind, attributes, out);
    default:
      return InvalidArgument("kind: unknown op kind " + std::to_string(kind) +
                             " (known: 1 = gqa, 2 = paged_gqa, 3 = sparse_mla, 4 = "
                             "sparse_mla_metadata, 5 = paged_gqa_varlen)");
  }
}

}  // namespace attnrt::core

extern "C" {

ATTNRT_API const char* attnrt_op_input_name(int32_t op_kind, size_t index) {
  if (op_kind == ATTNRT_OP_SPARSE_MLA || op_kind == ATTNRT_OP_SPARSE_MLA_METADATA) {
    return attnrt::core::SparseMlaInputName(op_kind, index);
  }
  if (op_kind == ATTNRT_OP_PAGED_GQA) {
    return index < ATTNRT_PAGED_GQA_NUM_INPUTS ? attnrt::core::paged_gqa::InputName(index)
                                               : nullptr;
  }
  if (op_kind == ATTNRT_OP_PAGED_GQA_VARLEN) {
    return index < ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS
               ? attnrt::core::paged_gqa_varlen::InputName(index)
               : nullptr;
  }
  if (op_kind != ATTNRT_OP_GQA || index >= ATTNRT_GQA_NUM_INPUTS) return nullptr;
  return attnrt::core::gqa::InputName(index);
}

ATTNRT_API const char* attnrt_op_output_name(int32_t op_kind, size_t index) {
  if (op_kind == ATTNRT_OP_SPARSE_MLA || op_kind == ATTNRT_OP_SPARSE_MLA_METADATA) {
    return attnrt::core::SparseMlaOutputName(op_kind, index);
  }
  if (op_kind == ATTNRT_OP_PAGED_GQA) {
    return index < ATTNRT_PAGED_GQA_NUM_OUTPUTS ? attnrt::core::paged_gqa::OutputName(index)
                                                : nullptr;
  }
  if (op_kind == ATTNRT_OP_PAGED_GQA_VARLEN) {
    return index < ATTNRT_PAGED_GQA_VARLEN_NUM_OUTPUTS
               ? attnrt::core::paged_gqa_varlen::OutputName(index)
               : nullptr;
  }
  if (op_kind != ATTNRT_OP_GQA || index >= ATTNRT_GQA_NUM_OUTPUTS) return nullptr;
  return attnrt::core::gqa::OutputName(index);
}

}  // extern "C"
