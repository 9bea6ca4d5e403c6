// Paged GroupQueryAttention over packed variable-length batches as an op family: shapes and
// values are validated by paged_gqa_varlen_validation.cpp before any kernel runs.
#include <array>
#include <cstddef>
#include <vector>

#include "attnrt/ops/paged_gqa_varlen.h"
#include "core/ops/paged_gqa_family.h"
#include "core/ops/paged_gqa_older_layouts.h"
#include "core/ops/paged_gqa_varlen_validation.h"
#include "core/ops/tensor_checks.h"
#include "core/plugin_call.h"

namespace attnrt::core {
namespace {

// The op's inputs, those a caller built for an older ABI does not pass (key_start_loc before ABI
// 1.10) absent: callers pass as many inputs as they know (ReadSignature bounds the count).
class AllInputs {
 public:
  explicit AllInputs(const TensorList& given) {
    for (size_t i = 0; i < given.count && i < tensors_.size(); ++i) tensors_[i] = given.at(i);
  }
  TensorList list() const { return {tensors_.data(), tensors_.size()}; }

 private:
  std::array<const attnrt_tensor*, ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS> tensors_{};
};

class PagedGqaVarlenProblem final : public Problem {
 public:
  // The older layouts' copies are made here, once per plan, and live as long as the plan.
  explicit PagedGqaVarlenProblem(const attnrt_paged_gqa_varlen_problem& problem)
      : problem_(problem),
        abi14_(paged_gqa_layouts::ToAbi14(problem)),
        abi17_(paged_gqa_layouts::ToAbi17(problem)),
        abi18_(paged_gqa_layouts::ToAbi18(problem)) {}

  const void* abi() const override { return &problem_; }
  // attnrt_paged_gqa_problem grew fields in ABI 1.5 (p_precision), 1.8 (v_head_size) and 1.9
  // (value_cache_dtype, v_cache_bit_width), each moving the varlen problem's own fields: kernels of
  // older plugins get the layout they were built for.
  const void* abi_for(uint32_t plugin_abi_minor) const override {
    if (plugin_abi_minor < paged_gqa_layouts::kPPrecisionMinor) return &abi14_;
    if (plugin_abi_minor < paged_gqa_layouts::kValueHeadSizeMinor) return &abi17_;
    if (plugin_abi_minor < paged_gqa_layouts::kValueCacheTypeMinor) return &abi18_;
    return &problem_;
  }
  int32_t device_type() const override { return problem_.paged.gqa.device_type; }
  // The 1.4 layout has no p_precision (EXACT problems only), neither 1.4 nor 1.7 v_head_size, none
  // value_cache's own type; before 1.10 a kernel reads key rows by query_start_loc and adds no
  // ALiBi; before 1.12 it rotates nothing and knows one ALiBi form.
  AbiNeed abi_need() const override {
    AbiNeed need = PagedProblemNeed(problem_.paged);
    if (problem_.has_key_start_loc) {
      need = NewerNeed(need, {paged_gqa_layouts::kKeyStartLocMinor, "key_start_loc"});
    }
    if (problem_.has_alibi_slopes) {
      need = NewerNeed(need, {paged_gqa_layouts::kAlibiMinor, "alibi_slopes"});
    }
    const attnrt_gqa_attributes& a = problem_.paged.gqa.attributes;
    if (a.do_rotary == 1) {
      need = NewerNeed(need, {paged_gqa_layouts::kVarlenRotaryMinor, "rotary embedding"});
    }
    if (problem_.alibi_form != ATTNRT_ALIBI_FORM_SIGNED) {
      need = NewerNeed(need, {paged_gqa_layouts::kAlibiFormMinor, "alibi_form SYMMETRIC"});
    }
    if (a.causal == 0 && (a.local_window_size != -1 || problem_.local_window_right != -1)) {
      need = NewerNeed(
          need, {paged_gqa_layouts::kNonCausalWindowMinor, "a window of non-causal attention"});
    }
    return need;
  }

  Status Run(const KernelRecord& kernel, const TensorList& inputs, const TensorList& outputs,
             void* workspace, size_t workspace_size, void* stream) const override {
    attnrt_paged_gqa_varlen_args args{};
    std::vector<int32_t> seqlens_k;
    const AllInputs all(inputs);
    ATTNRT_RETURN_IF_ERROR(paged_gqa_varlen::ValidateRun(problem_, all.list().tensors,
                                                         all.list().count, outputs.tensors,
                                                         outputs.count, &args, &seqlens_k));
    // No sequence has a query row: nothing to read or write.
    if (args.max_query_len == 0) return Status::Ok();
    // A causal sequence with fewer keys than query rows (ABI 1.11): a kernel built before it
    // assumed T_b >= q_len_b; only the run's seq_lens say, so it is refused here.
    if (problem_.paged.gqa.attributes.causal != 0 &&
        kernel.plugin->abi_minor < paged_gqa_layouts::kBottomRightCausalMinor) {
      for (size_t b = 0; b < seqlens_k.size(); ++b) {
        const int64_t q_len = int64_t{args.query_start_loc[b + 1]} - args.query_start_loc[b];
        if (int64_t{seqlens_k[b]} + 1 < q_len) {
          return Unsupported(StrCat(
              kernel.name, ": plugin '", kernel.plugin->name, "' was built for ABI 1.",
              kernel.plugin->abi_minor, ", and causal rows that outnumber their context (seq_lens[",
              b, "] = ", int64_t{seqlens_k[b]} + 1, " < ", q_len, " query rows) need ABI 1.",
              paged_gqa_layouts::kBottomRightCausalMinor));
        }
      }
    }
    args.paged.gqa.workspace = workspace;
    args.paged.gqa.workspace_size = workspace_size;
    args.paged.gqa.stream = stream;
    // A kernel built before ABI 1.10 gets the args it knows: they end before key_start_loc (NULL
    // here, as alibi_slopes: abi_need() offered it no problem with either).
    if (kernel.plugin->abi_minor < paged_gqa_layouts::kKeyStartLocMinor) {
      args.struct_size = offsetof(attnrt_paged_gqa_varlen_args, key_start_loc);
    } else if (kernel.plugin->abi_minor < paged_gqa_layouts::kVarlenRotaryMinor) {
      args.struct_size = offsetof(attnrt_paged_gqa_varlen_args, position_ids);
    }
    if (kernel.plugin->abi_minor < paged_gqa_layouts::kPPrecisionMinor) {
      paged_gqa_layouts::PointArgsAt(abi14_, &args);
    } else if (kernel.plugin->abi_minor < paged_gqa_layouts::kValueHeadSizeMinor) {
      paged_gqa_layouts::PointArgsAt(abi17_, &args);
    } else if (kernel.plugin->abi_minor < paged_gqa_layouts::kValueCacheTypeMinor) {
      paged_gqa_layouts::PointArgsAt(abi18_, &args);
    }
    return RunKernel(kernel, &args);
  }

 private:
  attnrt_paged_gqa_varlen_problem problem_;
  paged_gqa_layouts::PagedGqaVarlenProblem14 abi14_;
  paged_gqa_layouts::PagedGqaVarlenProblem17 abi17_;
  paged_gqa_layouts::PagedGqaVarlenProblem18 abi18_;
};

class PagedGqaVarlenFamily final : public OpFamily {
 public:
  explicit PagedGqaVarlenFamily(const attnrt_paged_gqa_attributes& attributes)
      : attributes_(attributes) {}

  std::string AttributeText() const override { return PPrecisionText(attributes_.p_precision); }
  int32_t kind() const override { return ATTNRT_OP_PAGED_GQA_VARLEN; }
  size_t max_inputs() const override { return ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS; }
  size_t max_outputs() const override { return ATTNRT_PAGED_GQA_VARLEN_NUM_OUTPUTS; }
  const char* input_name(size_t index) const override { return paged_gqa_varlen::InputName(index); }
  const char* output_name(size_t index) const override {
    return paged_gqa_varlen::OutputName(index);
  }

  std::span<const size_t> HostReadInputs() const override {
    static constexpr size_t kInputs[] = {
        ATTNRT_PAGED_GQA_VARLEN_INPUT_QUERY_START_LOC, ATTNRT_PAGED_GQA_VARLEN_INPUT_SEQ_LENS,
        ATTNRT_PAGED_GQA_VARLEN_INPUT_BLOCK_TABLE,     ATTNRT_PAGED_GQA_VARLEN_INPUT_SLOT_MAPPING,
        ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_START_LOC,   ATTNRT_PAGED_GQA_VARLEN_INPUT_POSITION_IDS,
        ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_POSITION_IDS};
    return kInputs;
  }
  std::span<const size_t> WrittenInputs() const override {
    static constexpr size_t kInputs[] = {ATTNRT_PAGED_GQA_VARLEN_INPUT_KEY_CACHE,
                                         ATTNRT_PAGED_GQA_VARLEN_INPUT_VALUE_CACHE};
    return kInputs;
  }

  Status Prepare(const TensorList& inputs, const TensorList& outputs,
                 std::unique_ptr<Problem>* out) const override {
    attnrt_paged_gqa_varlen_problem problem{};
    const AllInputs all(inputs);
    ATTNRT_RETURN_IF_ERROR(paged_gqa_varlen::ValidateShapes(attributes_, all.list().tensors,
                                                            all.list().count, outputs.tensors,
                                                            outputs.count, &problem));
    // The op exists since ABI 1.2: only plugins built for it register kernels of this kind.
    *out = std::make_unique<PagedGqaVarlenProblem>(problem);
    return Status::Ok();
  }

 private:
  attnrt_paged_gqa_attributes attributes_;
};

}  // namespace

Status CreatePagedGqaVarlenFamily(const void* attributes, std::unique_ptr<OpFamily>* out) {
  attnrt_paged_gqa_attributes validated{};
  ATTNRT_RETURN_IF_ERROR(paged_gqa_varlen::ValidateAttributes(attributes, &validated));
  *out = std::make_unique<PagedGqaVarlenFamily>(validated);
  return Status::Ok();
}

}  // namespace attnrt::core
