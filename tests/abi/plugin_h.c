/* plugin.h compiles alone as strict C11. */
#include "attnrt/plugin.h"

#include <stddef.h>

_Static_assert(offsetof(attnrt_plugin_api, struct_size) == 0, "struct_size comes first");
_Static_assert(offsetof(attnrt_kernel_desc, struct_size) == 0, "struct_size comes first");
_Static_assert(offsetof(attnrt_host_services, struct_size) == 0, "struct_size comes first");

size_t attnrt_abi_test_c_plugin_h(void);
size_t attnrt_abi_test_c_plugin_h(void) { return sizeof(attnrt_plugin_api); }
