/* A C11 program linked against libattnrt.so: the version entry points work from C, and
 * attnrt_runtime_options_init takes NULL (compiles, and is refused with a status). */
#include <stdio.h>
#include <string.h>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"
#include "attnrt/plugin.h"

int main(void) {
  const char* version = attnrt_version_string();
  uint32_t major = 0;
  uint32_t minor = 0;
  if (version == NULL || strlen(version) == 0) {
    fprintf(stderr, "attnrt_version_string returned an empty string\n");
    return 1;
  }
  attnrt_abi_version(&major, &minor);
  if (major != ATTNRT_ABI_VERSION_MAJOR || minor != ATTNRT_ABI_VERSION_MINOR) {
    fprintf(stderr, "ABI %u.%u, headers %d.%d\n", major, minor, ATTNRT_ABI_VERSION_MAJOR,
            ATTNRT_ABI_VERSION_MINOR);
    return 1;
  }
  if (strcmp(attnrt_status_name(ATTNRT_OK), "ATTNRT_OK") != 0) {
    fprintf(stderr, "attnrt_status_name(ATTNRT_OK) = %s\n", attnrt_status_name(ATTNRT_OK));
    return 1;
  }
  attnrt_runtime_options options;
  if (attnrt_runtime_options_init(&options) != ATTNRT_OK ||
      options.struct_size != ATTNRT_RUNTIME_OPTIONS_STRUCT_SIZE ||
      options.allow_insecure_plugins != -1) {
    fprintf(stderr, "attnrt_runtime_options_init(&options) did not set the defaults\n");
    return 1;
  }
  if (attnrt_runtime_options_init(NULL) != ATTNRT_ERROR_INVALID_ARGUMENT ||
      strstr(attnrt_last_error_message(), "options") == NULL) {
    fprintf(stderr, "attnrt_runtime_options_init(NULL): %s\n", attnrt_last_error_message());
    return 1;
  }
  printf("attnrt %s, ABI %u.%u\n", version, major, minor);
  return 0;
}
