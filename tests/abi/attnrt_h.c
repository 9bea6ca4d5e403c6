/* attnrt.h compiles alone as strict C11, and attnrt_tensor keeps DLPack's DLTensor layout. */
#include "attnrt/attnrt.h"

#include <stddef.h>

_Static_assert(offsetof(attnrt_tensor, data) == 0, "DLTensor.data");
_Static_assert(offsetof(attnrt_tensor, device) == sizeof(void*), "DLTensor.device");
_Static_assert(sizeof(attnrt_device) == 8, "DLDevice is two int32");
_Static_assert(sizeof(attnrt_dtype) == 4, "DLDataType is 4 bytes");
_Static_assert(offsetof(attnrt_tensor, shape) == 24, "DLTensor.shape");
_Static_assert(offsetof(attnrt_tensor, byte_offset) == 40, "DLTensor.byte_offset");
_Static_assert(sizeof(attnrt_tensor) == 48, "DLTensor size");
_Static_assert(ATTNRT_OK == 0, "ATTNRT_OK is 0");

attnrt_status attnrt_abi_test_c_attnrt_h(void);
attnrt_status attnrt_abi_test_c_attnrt_h(void) { return ATTNRT_OK; }
