// Every ABI header compiles as C++ (together, in any order) with strict warnings.
#include "attnrt/attnrt.h"
#include "attnrt/block_pool.h"
#include "attnrt/ops/gqa.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/sparse_mla.h"
#include "attnrt/plugin.h"

#include <cstddef>
#include <type_traits>

static_assert(std::is_standard_layout_v<attnrt_tensor>);
static_assert(std::is_trivially_copyable_v<attnrt_gqa_attributes>);
static_assert(sizeof(attnrt_tensor) == 48);
static_assert(ATTNRT_GQA_NUM_INPUTS == 16 && ATTNRT_GQA_NUM_OUTPUTS == 4);
static_assert(ATTNRT_PAGED_GQA_NUM_INPUTS == 17 && ATTNRT_PAGED_GQA_NUM_OUTPUTS == 2);
static_assert(std::is_trivially_copyable_v<attnrt_paged_gqa_attributes>);
static_assert(ATTNRT_SPARSE_MLA_NUM_INPUTS == 18 && ATTNRT_SPARSE_MLA_NUM_OUTPUTS == 2);
static_assert(std::is_trivially_copyable_v<attnrt_sparse_mla_attributes>);

int attnrt_abi_test_cxx_all_headers() {
  attnrt_gqa_attributes a;
  attnrt_gqa_attributes_init(&a);
  return a.causal;
}
