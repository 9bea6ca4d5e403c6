/* ops/paged_gqa.h and block_pool.h compile alone as strict C11, including the static inline
 * initializer. */
#include "attnrt/block_pool.h"
#include "attnrt/ops/paged_gqa.h"

int32_t attnrt_abi_test_c_paged_gqa_h(void);
int32_t attnrt_abi_test_c_paged_gqa_h(void) {
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  attnrt_block_pool_options o = {sizeof(attnrt_block_pool_options), 16, 16};
  return a.gqa.causal + a.kv_layout + (int32_t)ATTNRT_PAGED_GQA_NUM_INPUTS +
         (int32_t)ATTNRT_PAGED_GQA_NUM_OUTPUTS + o.block_size;
}
