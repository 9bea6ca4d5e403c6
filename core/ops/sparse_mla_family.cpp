// Sparse MLA op families: ATTNRT_OP_SPARSE_MLA (kernels from plugins) and
// ATTNRT_OP_SPARSE_MLA_METADATA (computed by the core: the int32 [2048] work partition).
#include "core/ops/sparse_mla_family.h"

#include <new>
#include <vector>

#include "attnrt/ops/sparse_mla.h"
#include "core/ops/sparse_mla_metadata.h"
#include "core/ops/sparse_mla_validation.h"
#include "core/plugin_call.h"

namespace attnrt::core {
namespace {

class SparseMlaProblem final : public Problem {
 public:
  SparseMlaProblem(const attnrt_sparse_mla_problem& problem, bool metadata_op, bool block_strided)
      : problem_(problem), metadata_op_(metadata_op), block_strided_(block_strided) {}

  const void* abi() const override { return &problem_; }
  int32_t device_type() const override { return problem_.device_type; }
  bool computed_by_core() const override { return metadata_op_; }

  // Global slot ids and block strides are fields of ABI 1.6 (a 1.5 kernel would read the caches as
  // compact and the slots as logical positions).
  AbiNeed abi_need() const override {
    if (problem_.attributes.topk_value_mode == 3) return {6, "topk_value_mode 3 (global slot ids)"};
    if (block_strided_) return {6, "a PA_BBND cache with a block stride"};
    return {};
  }

  Status Run(const KernelRecord& kernel, const TensorList& inputs, const TensorList& outputs,
             void* workspace, size_t workspace_size, void* stream) const override {
    try {
      std::vector<attnrt_sparse_mla_batch> batches;
      attnrt_sparse_mla_args args{};
      ATTNRT_RETURN_IF_ERROR(sparse_mla::ValidateRun(
          problem_, inputs.tensors, inputs.count, outputs.tensors, outputs.count, &batches, &args));
      args.workspace = workspace;
      args.workspace_size = workspace_size;
      args.stream = stream;
      return RunKernel(kernel, &args);
    } catch (const std::bad_alloc&) {
      return {ATTNRT_ERROR_OUT_OF_MEMORY, "sparse_mla: out of memory"};
    }
  }

  Status RunInCore(const TensorList& inputs, const TensorList& outputs,
                   int32_t num_threads) const override {
    try {
      const attnrt_tensor* out = outputs.at(ATTNRT_SPARSE_MLA_METADATA_OUTPUT);
      ATTNRT_RETURN_IF_ERROR(sparse_mla::ValidateMetadataRun(inputs.tensors, inputs.count, *out));
      std::vector<attnrt_sparse_mla_batch> batches;
      ATTNRT_RETURN_IF_ERROR(
          sparse_mla::ResolveBatches(problem_, inputs.tensors, inputs.count, &batches));
      auto* words = reinterpret_cast<int32_t*>(static_cast<char*>(out->data) + out->byte_offset);
      return sparse_mla::BuildMetadata(
          problem_, batches,
          sparse_mla::Signature(problem_.attributes, inputs.tensors, inputs.count), num_threads,
          words);
    } catch (const std::bad_alloc&) {
      return {ATTNRT_ERROR_OUT_OF_MEMORY, "sparse_mla_metadata: out of memory"};
    }
  }

 private:
  attnrt_sparse_mla_problem problem_;
  bool metadata_op_;
  bool block_strided_;  // a PA_BBND cache's blocks lie further apart than compact ones
};

class SparseMlaFamily final : public OpFamily {
 public:
  SparseMlaFamily(const attnrt_sparse_mla_attributes& attributes, bool metadata_op)
      : attributes_(attributes), metadata_op_(metadata_op) {}

  int32_t kind() const override {
    return metadata_op_ ? ATTNRT_OP_SPARSE_MLA_METADATA : ATTNRT_OP_SPARSE_MLA;
  }
  size_t max_inputs() const override { return ATTNRT_SPARSE_MLA_NUM_INPUTS; }
  size_t max_outputs() const override { return metadata_op_ ? 1 : ATTNRT_SPARSE_MLA_NUM_OUTPUTS; }
  const char* input_name(size_t index) const override { return sparse_mla::InputName(index); }
  const char* output_name(size_t index) const override {
    return metadata_op_ ? (index == 0 ? "metadata" : "?") : sparse_mla::OutputName(index);
  }

  // Every integer input: sparse indices, block tables, cumulative and used lengths, top-k lengths
  // and the metadata.
  std::span<const size_t> HostReadInputs() const override {
    static constexpr size_t kInputs[] = {
        ATTNRT_SPARSE_MLA_INPUT_ORI_SPARSE_INDICES, ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES,
        ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE,    ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE,
        ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q,       ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_ORI_KV,
        ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_CMP_KV,  ATTNRT_SPARSE_MLA_INPUT_SEQUSED_Q,
        ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV,     ATTNRT_SPARSE_MLA_INPUT_SEQUSED_CMP_KV,
        ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV,    ATTNRT_SPARSE_MLA_INPUT_ORI_TOPK_LENGTH,
        ATTNRT_SPARSE_MLA_INPUT_CMP_TOPK_LENGTH,    ATTNRT_SPARSE_MLA_INPUT_METADATA};
    return kInputs;
  }

  Status Prepare(const TensorList& inputs, const TensorList& outputs,
                 std::unique_ptr<Problem>* out) const override {
    attnrt_sparse_mla_problem problem{};
    bool block_strided = false;
    ATTNRT_RETURN_IF_ERROR(sparse_mla::ValidateShapes(attributes_, inputs.tensors, inputs.count,
                                                      outputs.tensors, outputs.count, metadata_op_,
                                                      &problem, &block_strided));
    *out = std::make_unique<SparseMlaProblem>(problem, metadata_op_, block_strided);
    return Status::Ok();
  }

 private:
  attnrt_sparse_mla_attributes attributes_;
  bool metadata_op_;
};

}  // namespace

Status CreateSparseMlaFamily(int32_t kind, const void* attributes, std::unique_ptr<OpFamily>* out) {
  attnrt_sparse_mla_attributes validated{};
  ATTNRT_RETURN_IF_ERROR(sparse_mla::ValidateAttributes(attributes, &validated));
  *out = std::make_unique<SparseMlaFamily>(validated, kind == ATTNRT_OP_SPARSE_MLA_METADATA);
  return Status::Ok();
}

const char* SparseMlaInputName(int32_t kind, size_t index) {
  if (index >= ATTNRT_SPARSE_MLA_NUM_INPUTS) return nullptr;
  (void)kind;
  return sparse_mla::InputName(index);
}

const char* SparseMlaOutputName(int32_t kind, size_t index) {
  if (kind == ATTNRT_OP_SPARSE_MLA_METADATA) return index == 0 ? "metadata" : nullptr;
  return index < ATTNRT_SPARSE_MLA_NUM_OUTPUTS ? sparse_mla::OutputName(index) : nullptr;
}

}  // namespace attnrt::core
