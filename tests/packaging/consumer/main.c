/* A C11 application of an installed attnrt: creates a runtime with the default plugin search (the
 * plugins installed beside libattnrt.so) and prints the version, the plugins and any diagnostics.
 * Exit status 0 only when the runtime was created. */
#include <attnrt/attnrt.h>
#include <stdio.h>

int main(void) {
  attnrt_runtime* runtime = NULL;
  attnrt_status status = attnrt_runtime_create(NULL, &runtime);
  if (status != ATTNRT_OK) {
    fprintf(stderr, "attnrt_runtime_create: %s: %s\n", attnrt_status_name(status),
            attnrt_last_error_message());
    return 1;
  }
  size_t num_plugins = 0;
  size_t num_diagnostics = 0;
  attnrt_runtime_plugin_count(runtime, &num_plugins);
  attnrt_runtime_diagnostic_count(runtime, &num_diagnostics);
  printf("attnrt %s, plugins: %zu, diagnostics: %zu\n", attnrt_version_string(), num_plugins,
         num_diagnostics);
  for (size_t i = 0; i < num_plugins; ++i) {
    attnrt_plugin_info info = {0};
    info.struct_size = sizeof info;
    if (attnrt_runtime_plugin_info(runtime, i, &info) == ATTNRT_OK) {
      printf("plugin %s %s (%zu kernels)\n", info.name, info.path, info.num_kernels);
    }
  }
  for (size_t i = 0; i < num_diagnostics; ++i) {
    attnrt_diagnostic diagnostic = {0};
    diagnostic.struct_size = sizeof diagnostic;
    if (attnrt_runtime_diagnostic(runtime, i, &diagnostic) == ATTNRT_OK) {
      printf("diagnostic %s: %s\n", diagnostic.path, diagnostic.message);
    }
  }
  attnrt_runtime_destroy(runtime);
  return 0;
}
