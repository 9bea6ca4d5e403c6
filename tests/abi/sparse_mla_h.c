/* ops/sparse_mla.h compiles alone as strict C11, including its static inline initializer. */
#include "attnrt/ops/sparse_mla.h"

int32_t attnrt_abi_test_c_sparse_mla_h(void);
int32_t attnrt_abi_test_c_sparse_mla_h(void) {
  attnrt_sparse_mla_attributes a;
  attnrt_sparse_mla_attributes_init(&a);
  return a.rope_head_dim + (int32_t)ATTNRT_SPARSE_MLA_NUM_INPUTS +
         (int32_t)ATTNRT_SPARSE_MLA_NUM_OUTPUTS + ATTNRT_SPARSE_MLA_METADATA_SIZE;
}
