// A ggml backend library built as if against another ggml: its registry reports
// GGML_BACKEND_API_VERSION + 1. ggml's loader must skip it with a message
// (flash_attn_ext_runtime_test.cpp, ALibraryOfAnotherApiVersionIsSkippedWithAMessage), which is
// what a libattnrt_ggml.so built against another llama.cpp meets.
#include "ggml-backend-impl.h"

namespace {

const char* Name(ggml_backend_reg_t) { return "ATTNRT_API_MISMATCH"; }
size_t DeviceCount(ggml_backend_reg_t) { return 0; }
ggml_backend_dev_t Device(ggml_backend_reg_t, size_t) { return nullptr; }
void* ProcAddress(ggml_backend_reg_t, const char*) { return nullptr; }

}  // namespace

extern "C" __attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_init(void) {
  static ggml_backend_reg reg = {/* .api_version = */ GGML_BACKEND_API_VERSION + 1,
                                 /* .iface       = */ {Name, DeviceCount, Device, ProcAddress},
                                 /* .context     = */ nullptr};
  return &reg;
}
