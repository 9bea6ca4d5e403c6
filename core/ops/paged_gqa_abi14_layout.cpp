#include "core/ops/paged_gqa_abi14_layout.h"

#include <cstring>
#include <type_traits>

namespace attnrt::core::paged_gqa_abi14 {
namespace {

// The ABI 1.4 layout on LP64 (x86-64, AArch64), as the ABI 1.4 headers give it.
static_assert(std::is_standard_layout_v<PagedGqaProblem> &&
              std::is_standard_layout_v<PagedGqaVarlenProblem>);
static_assert(sizeof(attnrt_gqa_problem) == 240);
static_assert(offsetof(PagedGqaProblem, gqa) == 8);
static_assert(offsetof(PagedGqaProblem, num_blocks) == 248);
static_assert(offsetof(PagedGqaProblem, block_size) == 256);
static_assert(offsetof(PagedGqaProblem, max_blocks_per_seq) == 264);
static_assert(offsetof(PagedGqaProblem, kv_layout) == 272);
static_assert(offsetof(PagedGqaProblem, key_cache_strides) == 280);
static_assert(offsetof(PagedGqaProblem, value_cache_strides) == 312);
static_assert(sizeof(PagedGqaProblem) == 344);
static_assert(offsetof(PagedGqaVarlenProblem, paged) == 8);
static_assert(offsetof(PagedGqaVarlenProblem, num_tokens) == 352);
static_assert(offsetof(PagedGqaVarlenProblem, has_slot_mapping) == 360);
static_assert(sizeof(PagedGqaVarlenProblem) == 368);

// ABI 1.5 kept every field before p_precision where it was; only what follows the paged member of
// the varlen problem moved.
static_assert(offsetof(attnrt_paged_gqa_problem, gqa) == offsetof(PagedGqaProblem, gqa));
static_assert(offsetof(attnrt_paged_gqa_problem, num_blocks) ==
              offsetof(PagedGqaProblem, num_blocks));
static_assert(offsetof(attnrt_paged_gqa_problem, value_cache_strides) ==
              offsetof(PagedGqaProblem, value_cache_strides));
static_assert(offsetof(attnrt_paged_gqa_problem, p_precision) == sizeof(PagedGqaProblem));
static_assert(offsetof(attnrt_paged_gqa_varlen_problem, num_tokens) ==
              offsetof(PagedGqaVarlenProblem, num_tokens) + 8);

// The args structs are the same in both versions: only their problem pointers are redirected.
static_assert(sizeof(attnrt_gqa_args) == 192);
static_assert(sizeof(attnrt_paged_gqa_args) == 232);
static_assert(offsetof(attnrt_paged_gqa_args, gqa) == 16);
static_assert(sizeof(attnrt_paged_gqa_varlen_args) == 280);
static_assert(offsetof(attnrt_paged_gqa_varlen_args, paged) == 16);
static_assert(offsetof(attnrt_paged_gqa_varlen_args, max_query_len) == 272);

}  // namespace

PagedGqaVarlenProblem ToAbi14(const attnrt_paged_gqa_varlen_problem& problem) {
  PagedGqaVarlenProblem out;
  std::memset(&out, 0, sizeof out);  // padding too: a kernel may hash or copy the bytes
  out.struct_size = sizeof(PagedGqaVarlenProblem);
  const attnrt_paged_gqa_problem& paged = problem.paged;
  out.paged.struct_size = sizeof(PagedGqaProblem);
  out.paged.gqa = paged.gqa;
  out.paged.num_blocks = paged.num_blocks;
  out.paged.block_size = paged.block_size;
  out.paged.max_blocks_per_seq = paged.max_blocks_per_seq;
  out.paged.kv_layout = paged.kv_layout;
  std::memcpy(out.paged.key_cache_strides, paged.key_cache_strides,
              sizeof out.paged.key_cache_strides);
  std::memcpy(out.paged.value_cache_strides, paged.value_cache_strides,
              sizeof out.paged.value_cache_strides);
  out.num_tokens = problem.num_tokens;
  out.has_slot_mapping = problem.has_slot_mapping;
  return out;
}

void PointArgsAt(const PagedGqaVarlenProblem& problem, attnrt_paged_gqa_varlen_args* args) {
  // The kernel casts these back to its own (ABI 1.4) struct types.
  args->problem = reinterpret_cast<const attnrt_paged_gqa_varlen_problem*>(&problem);
  args->paged.problem = reinterpret_cast<const attnrt_paged_gqa_problem*>(&problem.paged);
  args->paged.gqa.problem = &problem.paged.gqa;
}

}  // namespace attnrt::core::paged_gqa_abi14
