/* ops/gqa.h compiles alone as strict C11, including its static inline initializer. */
#include "attnrt/ops/gqa.h"

int32_t attnrt_abi_test_c_gqa_h(void);
int32_t attnrt_abi_test_c_gqa_h(void) {
  attnrt_gqa_attributes a;
  attnrt_gqa_attributes_init(&a);
  return a.causal + (int32_t)ATTNRT_GQA_NUM_INPUTS + (int32_t)ATTNRT_GQA_NUM_OUTPUTS;
}
