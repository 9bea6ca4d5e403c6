// paged_gqa_varlen runs (baseline ISA): packed variable-length batches over a paged cache
// (attnrt/ops/paged_gqa_varlen.h) through the paged kernels' algorithms (see gqa_paged.h). The
// flash kernels run the gqa.flash driver on the packed rows (tiles of one sequence's rows; a step
// whose every sequence has one query row takes the decode path, split-KV and grouped heads
// included); the naive kernels run the gqa.naive row pipeline. The new K/V rows are appended by
// the paged staging step, which follows query_start_loc and skips rows slot_mapping marks -1.
#include <algorithm>
#include <string>

#include "attnrt/ops/paged_gqa_varlen.h"
#include "gqa_flash.h"
#include "gqa_paged.h"
#include "gqa_paged_stage.h"
#include "gqa_run.h"
#include "plugin_context.h"

namespace attnrt::cpu {
namespace {

int32_t ArgsFit(const attnrt_paged_gqa_varlen_args& a, char* error, size_t error_capacity) {
  if (a.struct_size >= sizeof(attnrt_paged_gqa_varlen_args)) {
    return PagedGqaArgsFit(a.paged, error, error_capacity);
  }
  WriteMessage(error, error_capacity,
               "attnrt_paged_gqa_varlen_args struct_size " + std::to_string(a.struct_size) +
                   " is smaller than the " + std::to_string(sizeof(attnrt_paged_gqa_varlen_args)) +
                   " bytes this kernel was built with");
  return ATTNRT_ERROR_ABI_MISMATCH;
}

// key_start_loc (ABI 1.10; ArgsFit checked the args' size), NULL when not given.
const int32_t* KeyStartLoc(const attnrt_paged_gqa_varlen_args& a) {
  return a.problem->has_key_start_loc ? a.key_start_loc : nullptr;
}

// The paged problem of a step whose every sequence has one query row: S = 1 (and L = 1 when rows
// are appended), so the drivers take their decode paths.
attnrt_paged_gqa_problem DecodeProblem(const attnrt_paged_gqa_varlen_problem& p) {
  attnrt_paged_gqa_problem d = p.paged;
  d.gqa.sequence_length = 1;
  if (d.gqa.kv_sequence_length > 0) d.gqa.kv_sequence_length = 1;
  return d;
}

// Every sequence has exactly one query row, at row b, and its new K/V rows (if any) are that row's:
// the packed batch is a padded one of S = 1.
bool AllDecode(const attnrt_paged_gqa_varlen_args& a) {
  const int64_t batch = a.problem->paged.gqa.batch_size;
  const bool own_key_rows =
      KeyStartLoc(a) != nullptr && a.problem->paged.gqa.kv_sequence_length > 0;
  return a.max_query_len == 1 && a.query_start_loc[batch] == batch && !own_key_rows;
}

// A varlen call in the paged kernels' terms: the paged arguments (for an all-decode step, of the
// S = 1 problem) and the staging input that lays out the packed rows.
struct PagedCall {
  attnrt_paged_gqa_problem decode;
  attnrt_paged_gqa_args paged;
  PagedStageInput stage;

  explicit PagedCall(const attnrt_paged_gqa_varlen_args& a)
      : decode(DecodeProblem(*a.problem)),
        paged(a.paged),
        stage{&paged,
              a.query_start_loc,
              a.slot_mapping,
              KeyStartLoc(a),
              a.problem->has_alibi_slopes ? a.alibi_slopes : nullptr,
              a.max_query_len,
              a.problem->local_window_right,
              a.problem->alibi_form == ATTNRT_ALIBI_FORM_SYMMETRIC,
              a.problem->has_position_ids ? a.position_ids : nullptr,
              a.problem->has_key_position_ids ? a.key_position_ids : nullptr,
              /*varlen=*/true} {
    if (AllDecode(a)) {
      paged.problem = &decode;
      paged.gqa.problem = &decode.gqa;
      stage.query_start_loc = nullptr;  // row b of every packed tensor is sequence b's
      stage.key_start_loc = nullptr;
    }
  }
  PagedCall(const PagedCall&) = delete;
  PagedCall& operator=(const PagedCall&) = delete;
};

GqaFlashPaging Paging(const attnrt_paged_gqa_problem& p, const int32_t* table,
                      const PagedStageInput* stage) {
  return GqaFlashPaging{table,
                        p.max_blocks_per_seq,
                        p.block_size,
                        PagedGqaPoolStrides(p, p.key_cache_strides, false),
                        PagedGqaPoolStrides(p, p.value_cache_strides, true),
                        &PagedGqaStage,
                        stage,
                        p.v_head_size};
}

}  // namespace

// Room for the prompt form and for the decode form of the problem.
size_t PagedGqaVarlenFlashWorkspaceSize(void* plugin_context, const void* problem,
                                        const GqaFlashOps& ops) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_varlen_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_varlen_problem)) return 0;
  const attnrt_paged_gqa_problem decode = DecodeProblem(p);
  return std::max(GqaFlashPagedWorkspaceSize(plugin_context, p.paged.gqa,
                                             Paging(p.paged, nullptr, nullptr), ops),
                  GqaFlashPagedWorkspaceSize(plugin_context, decode.gqa,
                                             Paging(decode, nullptr, nullptr), ops));
}

size_t PagedGqaVarlenNaiveWorkspaceSize(void* plugin_context, const void* problem) noexcept {
  const auto& p = *static_cast<const attnrt_paged_gqa_varlen_problem*>(problem);
  if (p.struct_size < sizeof(attnrt_paged_gqa_varlen_problem)) return 0;
  const auto& context = *static_cast<const PluginContext*>(plugin_context);
  return GqaWorkspaceSize(context.host, p.paged.gqa, p.paged.v_head_size);
}

int32_t PagedGqaVarlenFlashRun(void* plugin_context, const void* args, char* error,
                               size_t error_capacity, const GqaFlashOps& ops) noexcept {
  try {
    const auto& a = *static_cast<const attnrt_paged_gqa_varlen_args*>(args);
    const int32_t fits = ArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const PagedCall call(a);
    const GqaFlashPaging paging = Paging(*call.paged.problem, call.paged.block_table, &call.stage);
    return GqaFlashRunPaged(plugin_context, call.paged.gqa, paging, ops, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa_varlen.flash run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

int32_t PagedGqaVarlenNaiveRun(void* plugin_context, const void* args, char* error,
                               size_t error_capacity, GqaAttendRowsFn rows) noexcept {
  try {
    const auto& context = *static_cast<const PluginContext*>(plugin_context);
    const auto& a = *static_cast<const attnrt_paged_gqa_varlen_args*>(args);
    const int32_t fits = ArgsFit(a, error, error_capacity);
    if (fits != ATTNRT_OK) return fits;
    const PagedCall call(a);
    return RunGqaStaged(context.host, call.paged.gqa, call.paged.problem->v_head_size,
                        &PagedGqaStage, &call.stage, rows, error, error_capacity);
  } catch (...) {
    WriteCurrentException(error, error_capacity, "paged_gqa_varlen.naive run()");
    return ATTNRT_ERROR_INTERNAL;
  }
}

}  // namespace attnrt::cpu
