// Paged GroupQueryAttention as an op family: shapes and values are validated by
// paged_gqa_validation.cpp (which reuses the GroupQueryAttention checks) before any kernel runs.
#include "core/ops/paged_gqa_family.h"

#include "attnrt/ops/paged_gqa.h"
#include "core/ops/paged_gqa_older_layouts.h"
#include "core/ops/paged_gqa_validation.h"
#include "core/plugin_call.h"

namespace attnrt::core {
namespace {

class PagedGqaProblem final : public Problem {
 public:
  PagedGqaProblem(const attnrt_paged_gqa_problem& problem, bool compact_pools)
      : problem_(problem), compact_pools_(compact_pools) {}

  const void* abi() const override { return &problem_; }
  int32_t device_type() const override { return problem_.gqa.device_type; }
  AbiNeed abi_need() const override {
    AbiNeed need = PagedProblemNeed(problem_);
    if (!compact_pools_) need = NewerNeed(need, {2, "a strided key_cache/value_cache"});
    return need;
  }

  Status Run(const KernelRecord& kernel, const TensorList& inputs, const TensorList& outputs,
             void* workspace, size_t workspace_size, void* stream) const override {
    attnrt_paged_gqa_args args{};
    ATTNRT_RETURN_IF_ERROR(paged_gqa::ValidateRun(problem_, inputs.tensors, inputs.count,
                                                  outputs.tensors, outputs.count, &args));
    // An empty batch has nothing to read or write; kernels never see one.
    if (problem_.gqa.batch_size == 0) return Status::Ok();
    args.gqa.workspace = workspace;
    args.gqa.workspace_size = workspace_size;
    args.gqa.stream = stream;
    return RunKernel(kernel, &args);
  }

 private:
  attnrt_paged_gqa_problem problem_;
  bool compact_pools_;
};

class PagedGqaFamily final : public OpFamily {
 public:
  explicit PagedGqaFamily(const attnrt_paged_gqa_attributes& attributes)
      : attributes_(attributes) {}

  std::string AttributeText() const override { return PPrecisionText(attributes_.p_precision); }
  int32_t kind() const override { return ATTNRT_OP_PAGED_GQA; }
  size_t max_inputs() const override { return ATTNRT_PAGED_GQA_NUM_INPUTS; }
  size_t max_outputs() const override { return ATTNRT_PAGED_GQA_NUM_OUTPUTS; }
  const char* input_name(size_t index) const override { return paged_gqa::InputName(index); }
  const char* output_name(size_t index) const override { return paged_gqa::OutputName(index); }

  std::span<const size_t> HostReadInputs() const override {
    static constexpr size_t kInputs[] = {
        ATTNRT_PAGED_GQA_INPUT_SEQLENS_K, ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH,
        ATTNRT_PAGED_GQA_INPUT_POSITION_IDS, ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE};
    return kInputs;
  }
  std::span<const size_t> WrittenInputs() const override {
    static constexpr size_t kInputs[] = {ATTNRT_PAGED_GQA_INPUT_KEY_CACHE,
                                         ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE};
    return kInputs;
  }

  Status Prepare(const TensorList& inputs, const TensorList& outputs,
                 std::unique_ptr<Problem>* out) const override {
    attnrt_paged_gqa_problem problem{};
    ATTNRT_RETURN_IF_ERROR(paged_gqa::ValidateShapes(attributes_, inputs.tensors, inputs.count,
                                                     outputs.tensors, outputs.count, &problem));
    *out = std::make_unique<PagedGqaProblem>(problem, paged_gqa::PoolsCompact(inputs.tensors));
    return Status::Ok();
  }

 private:
  attnrt_paged_gqa_attributes attributes_;
};

}  // namespace

std::string PPrecisionText(int32_t p_precision) {
  return p_precision == ATTNRT_P_PRECISION_INPUT ? "p_precision=input" : "p_precision=exact";
}

AbiNeed PPrecisionNeed(int32_t p_precision) {
  if (p_precision == ATTNRT_P_PRECISION_EXACT) return {};
  return {paged_gqa_layouts::kPPrecisionMinor, "p_precision INPUT"};
}

AbiNeed ValueHeadSizeNeed(const attnrt_paged_gqa_problem& problem) {
  if (problem.v_head_size == problem.gqa.head_size) return {};
  return {paged_gqa_layouts::kValueHeadSizeMinor, "a value head size other than head_size"};
}

AbiNeed ValueCacheTypeNeed(const attnrt_paged_gqa_problem& problem) {
  if (paged_gqa::SharesOneCacheType(problem)) return {};
  return {paged_gqa_layouts::kValueCacheTypeMinor, "a value_cache type other than key_cache's"};
}

AbiNeed HeadSizeNeed(const attnrt_paged_gqa_problem& problem) {
  if (problem.gqa.head_size % 8 == 0 && problem.v_head_size % 8 == 0) return {};
  return {paged_gqa_layouts::kValueCacheTypeMinor, "a head size that is not a multiple of 8"};
}

AbiNeed KvQuantNeed(const attnrt_gqa_attributes& attributes) {
  if (attributes.k_quant_type != ATTNRT_GQA_QUANT_PER_BLOCK_32) return {};
  return {7, attributes.kv_cache_bit_width == 4 ? "a PER_BLOCK_32 (Q4_0) KV cache"
                                                : "a PER_BLOCK_32 (Q8_0) KV cache"};
}

AbiNeed CacheDtypeNeed(attnrt_dtype cache_dtype) {
  if (cache_dtype.code != ATTNRT_DTYPE_CODE_FLOAT8_E5M2) return {};
  return {paged_gqa_layouts::kFloat8E5M2Minor, "a float8_e5m2 KV cache"};
}

AbiNeed NewerNeed(AbiNeed a, AbiNeed b) { return b.minor > a.minor ? b : a; }

AbiNeed PagedProblemNeed(const attnrt_paged_gqa_problem& problem) {
  return NewerNeed(
      NewerNeed(NewerNeed(KvQuantNeed(problem.gqa.attributes), PPrecisionNeed(problem.p_precision)),
                ValueHeadSizeNeed(problem)),
      NewerNeed(NewerNeed(ValueCacheTypeNeed(problem), HeadSizeNeed(problem)),
                NewerNeed(CacheDtypeNeed(problem.gqa.cache_dtype),
                          CacheDtypeNeed(problem.value_cache_dtype))));
}

Status CreatePagedGqaFamily(const void* attributes, std::unique_ptr<OpFamily>* out) {
  attnrt_paged_gqa_attributes validated{};
  ATTNRT_RETURN_IF_ERROR(paged_gqa::ValidateAttributes(attributes, &validated));
  *out = std::make_unique<PagedGqaFamily>(validated);
  return Status::Ok();
}

}  // namespace attnrt::core
