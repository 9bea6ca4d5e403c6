#include "core/ops/paged_gqa_older_layouts.h"

#include <cstring>
#include <type_traits>

namespace attnrt::core::paged_gqa_layouts {
namespace {

// The older layouts on LP64 (x86-64, AArch64), as those versions' headers give them.
static_assert(std::is_standard_layout_v<PagedGqaProblem14> &&
              std::is_standard_layout_v<PagedGqaVarlenProblem14> &&
              std::is_standard_layout_v<PagedGqaProblem17> &&
              std::is_standard_layout_v<PagedGqaVarlenProblem17> &&
              std::is_standard_layout_v<PagedGqaProblem18> &&
              std::is_standard_layout_v<PagedGqaVarlenProblem18>);
static_assert(sizeof(attnrt_gqa_problem) == 240);
static_assert(offsetof(PagedGqaProblem14, gqa) == 8);
static_assert(offsetof(PagedGqaProblem14, num_blocks) == 248);
static_assert(offsetof(PagedGqaProblem14, block_size) == 256);
static_assert(offsetof(PagedGqaProblem14, max_blocks_per_seq) == 264);
static_assert(offsetof(PagedGqaProblem14, kv_layout) == 272);
static_assert(offsetof(PagedGqaProblem14, key_cache_strides) == 280);
static_assert(offsetof(PagedGqaProblem14, value_cache_strides) == 312);
static_assert(sizeof(PagedGqaProblem14) == 344);
static_assert(offsetof(PagedGqaVarlenProblem14, paged) == 8);
static_assert(offsetof(PagedGqaVarlenProblem14, num_tokens) == 352);
static_assert(offsetof(PagedGqaVarlenProblem14, has_slot_mapping) == 360);
static_assert(sizeof(PagedGqaVarlenProblem14) == 368);
static_assert(offsetof(PagedGqaProblem17, p_precision) == 344);
static_assert(sizeof(PagedGqaProblem17) == 352);
static_assert(offsetof(PagedGqaVarlenProblem17, num_tokens) == 360);
static_assert(offsetof(PagedGqaVarlenProblem17, has_slot_mapping) == 368);
static_assert(sizeof(PagedGqaVarlenProblem17) == 376);
static_assert(offsetof(PagedGqaProblem18, v_head_size) == 352);
static_assert(sizeof(PagedGqaProblem18) == 360);
static_assert(offsetof(PagedGqaVarlenProblem18, num_tokens) == 368);
static_assert(offsetof(PagedGqaVarlenProblem18, has_slot_mapping) == 376);
static_assert(sizeof(PagedGqaVarlenProblem18) == 384);

// Each version kept every field before the appended one where it was; only what follows the paged
// member of the varlen problem moved.
static_assert(offsetof(attnrt_paged_gqa_problem, gqa) == offsetof(PagedGqaProblem14, gqa));
static_assert(offsetof(attnrt_paged_gqa_problem, num_blocks) ==
              offsetof(PagedGqaProblem14, num_blocks));
static_assert(offsetof(attnrt_paged_gqa_problem, value_cache_strides) ==
              offsetof(PagedGqaProblem14, value_cache_strides));
static_assert(offsetof(attnrt_paged_gqa_problem, p_precision) == sizeof(PagedGqaProblem14));
static_assert(offsetof(attnrt_paged_gqa_problem, p_precision) ==
              offsetof(PagedGqaProblem17, p_precision));
static_assert(offsetof(attnrt_paged_gqa_problem, v_head_size) == sizeof(PagedGqaProblem17));
static_assert(offsetof(attnrt_paged_gqa_problem, v_head_size) ==
              offsetof(PagedGqaProblem18, v_head_size));
static_assert(offsetof(attnrt_paged_gqa_problem, value_cache_dtype) == sizeof(PagedGqaProblem18));
static_assert(offsetof(attnrt_paged_gqa_varlen_problem, num_tokens) ==
              offsetof(PagedGqaVarlenProblem18, num_tokens) + 8);

// The args structs kept every field where it was (only their problem pointers are redirected for
// older kernels); ABI 1.10 appended key_start_loc to the varlen args, ABI 1.12 position_ids, past
// what older kernels read (ABI 1.11's args were 296 bytes).
static_assert(sizeof(attnrt_gqa_args) == 192);
static_assert(sizeof(attnrt_paged_gqa_args) == 232);
static_assert(offsetof(attnrt_paged_gqa_args, gqa) == 16);
static_assert(sizeof(attnrt_paged_gqa_varlen_args) == 312);
static_assert(offsetof(attnrt_paged_gqa_varlen_args, position_ids) == 296);
static_assert(offsetof(attnrt_paged_gqa_varlen_args, paged) == 16);
static_assert(offsetof(attnrt_paged_gqa_varlen_args, max_query_len) == 272);
static_assert(offsetof(attnrt_paged_gqa_varlen_args, key_start_loc) == 280);
// ABI 1.10 appended num_key_tokens and has_key_start_loc to the varlen problem, past its 1.9 end.
static_assert(offsetof(attnrt_paged_gqa_varlen_problem, num_key_tokens) ==
              offsetof(attnrt_paged_gqa_varlen_problem, has_slot_mapping) + 8);

// The fields every older layout shares with the current one.
template <class Old>
void CopyCommon(const attnrt_paged_gqa_varlen_problem& problem, Old* out) {
  std::memset(out, 0, sizeof *out);  // padding too: a kernel may hash or copy the bytes
  out->struct_size = sizeof(Old);
  const attnrt_paged_gqa_problem& paged = problem.paged;
  out->paged.struct_size = sizeof(out->paged);
  out->paged.gqa = paged.gqa;
  out->paged.num_blocks = paged.num_blocks;
  out->paged.block_size = paged.block_size;
  out->paged.max_blocks_per_seq = paged.max_blocks_per_seq;
  out->paged.kv_layout = paged.kv_layout;
  std::memcpy(out->paged.key_cache_strides, paged.key_cache_strides,
              sizeof out->paged.key_cache_strides);
  std::memcpy(out->paged.value_cache_strides, paged.value_cache_strides,
              sizeof out->paged.value_cache_strides);
  out->num_tokens = problem.num_tokens;
  out->has_slot_mapping = problem.has_slot_mapping;
}

template <class Old>
void Point(const Old& problem, attnrt_paged_gqa_varlen_args* args) {
  // The kernel casts these back to its own (older) struct types.
  args->problem = reinterpret_cast<const attnrt_paged_gqa_varlen_problem*>(&problem);
  args->paged.problem = reinterpret_cast<const attnrt_paged_gqa_problem*>(&problem.paged);
  args->paged.gqa.problem = &problem.paged.gqa;
}

}  // namespace

PagedGqaVarlenProblem14 ToAbi14(const attnrt_paged_gqa_varlen_problem& problem) {
  PagedGqaVarlenProblem14 out;
  CopyCommon(problem, &out);
  return out;
}

PagedGqaVarlenProblem17 ToAbi17(const attnrt_paged_gqa_varlen_problem& problem) {
  PagedGqaVarlenProblem17 out;
  CopyCommon(problem, &out);
  out.paged.p_precision = problem.paged.p_precision;
  return out;
}

PagedGqaVarlenProblem18 ToAbi18(const attnrt_paged_gqa_varlen_problem& problem) {
  PagedGqaVarlenProblem18 out;
  CopyCommon(problem, &out);
  out.paged.p_precision = problem.paged.p_precision;
  out.paged.v_head_size = problem.paged.v_head_size;
  return out;
}

void PointArgsAt(const PagedGqaVarlenProblem14& problem, attnrt_paged_gqa_varlen_args* args) {
  Point(problem, args);
}

void PointArgsAt(const PagedGqaVarlenProblem17& problem, attnrt_paged_gqa_varlen_args* args) {
  Point(problem, args);
}

void PointArgsAt(const PagedGqaVarlenProblem18& problem, attnrt_paged_gqa_varlen_args* args) {
  Point(problem, args);
}

}  // namespace attnrt::core::paged_gqa_layouts
