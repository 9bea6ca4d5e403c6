// libattnrt_ggml.so: a ggml backend, loaded at run time (ggml_backend_load, GGML_BACKEND_PATH),
// that runs GGML_OP_FLASH_ATTN_EXT through attnrt (docs/llama-cpp.md).
//
// Shaped as ggml's own BLAS backend: one ACCEL device working in host memory (its buffer type is
// the CPU backend's, the object of the host's libggml-base, so ggml's scheduler moves a node here
// from the CPU backend exactly when supports_op takes it), supports_op true only for the nodes
// attnrt serves (and the view nodes around them), no offload_op. ggml_backend_set_n_threads is
// exported through get_proc_address as ggml's hosts expect. ATTNRT_GGML=0 hides the device.
//
// Built against the exact ggml it is loaded into: the device and backend tables are ggml's internal
// ggml-backend-impl.h, and ggml refuses a library whose api_version differs.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <set>
#include <string>

#include "flash_attn_ext.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"

namespace attnrt_ggml {
namespace {

constexpr const char* kName = "ATTNRT";

FlashAttnServer& Server() {
  static FlashAttnServer* server = new FlashAttnServer();  // lives until the process ends
  return *server;
}

bool Enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("ATTNRT_GGML");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

bool Verbose() {
  static const bool verbose = [] {
    const char* v = std::getenv("ATTNRT_GGML_DEBUG");
    return v != nullptr && std::strcmp(v, "0") != 0 && *v != '\0';
  }();
  return verbose;
}

// Each distinct decline reason once (ATTNRT_GGML_DEBUG=1), so a user sees why a node stayed on the
// CPU backend without one line per layer and step.
void NoteDecline(const std::string& reason) {
  if (!Verbose()) return;
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(reason).second) {
    std::fprintf(stderr, "attnrt-ggml: FLASH_ATTN_EXT stays on the CPU backend: %s\n",
                 reason.c_str());
  }
}

// With ATTNRT_GGML_DEBUG set, the number of nodes attnrt computed (and of rows computed again by
// ggml's per-row algorithm, ggml_rows.h), when the process exits.
void ReportAtExit() {
  std::fprintf(stderr, "attnrt-ggml: %llu FLASH_ATTN_EXT nodes computed by attnrt\n",
               static_cast<unsigned long long>(Server().nodes_computed()));
  if (const uint64_t rows = Server().ggml_rows(); rows > 0) {
    std::fprintf(stderr,
                 "attnrt-ggml: %llu output rows left non-finite computed again as ggml does\n",
                 static_cast<unsigned long long>(rows));
  }
}

struct BackendContext {
  int n_threads = omp_get_max_threads();
};

// ---- backend (stream) ----------------------------------------------------------------------

const char* BackendName(ggml_backend_t) { return kName; }

void BackendFree(ggml_backend_t backend) {
  delete static_cast<BackendContext*>(backend->context);
  delete backend;
}

ggml_status GraphCompute(ggml_backend_t backend, ggml_cgraph* graph) {
  const auto* ctx = static_cast<const BackendContext*>(backend->context);
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
    ggml_tensor* node = ggml_graph_node(graph, i);
    if ((node->flags & GGML_TENSOR_FLAG_COMPUTE) == 0) continue;
    switch (node->op) {
      case GGML_OP_NONE:
      case GGML_OP_RESHAPE:
      case GGML_OP_VIEW:
      case GGML_OP_PERMUTE:
      case GGML_OP_TRANSPOSE:
        break;
      case GGML_OP_FLASH_ATTN_EXT: {
        std::string error;
        try {
          error = Server().Compute(node, ctx->n_threads);
        } catch (const std::exception& e) {
          error = e.what();
        } catch (...) {
          error = "unknown exception";
        }
        if (!error.empty()) {
          std::fprintf(stderr, "attnrt-ggml: FLASH_ATTN_EXT node '%s' failed: %s\n", node->name,
                       error.c_str());
          return GGML_STATUS_FAILED;
        }
        break;
      }
      default:
        std::fprintf(stderr, "attnrt-ggml: node '%s' (%s) was not claimed by this backend\n",
                     node->name, ggml_op_desc(node));
        return GGML_STATUS_FAILED;
    }
  }
  return GGML_STATUS_SUCCESS;
}

const ggml_backend_i kBackendInterface = {
    /* .get_name                = */ BackendName,
    /* .free                    = */ BackendFree,
    /* .set_tensor_async        = */ nullptr,
    /* .get_tensor_async        = */ nullptr,
    /* .set_tensor_2d_async     = */ nullptr,
    /* .get_tensor_2d_async     = */ nullptr,
    /* .cpy_tensor_async        = */ nullptr,
    /* .synchronize             = */ nullptr,
    /* .graph_plan_create       = */ nullptr,
    /* .graph_plan_free         = */ nullptr,
    /* .graph_plan_update       = */ nullptr,
    /* .graph_plan_compute      = */ nullptr,
    /* .graph_compute           = */ GraphCompute,
    /* .event_record            = */ nullptr,
    /* .event_wait              = */ nullptr,
    /* .graph_optimize          = */ nullptr,
};

ggml_guid_t Guid() {
  static ggml_guid guid = {0x61, 0x74, 0x74, 0x6e, 0x72, 0x74, 0x2d, 0x67,
                           0x67, 0x6d, 0x6c, 0x2d, 0x66, 0x61, 0x00, 0x01};
  return &guid;
}

ggml_backend_reg_t Reg();
ggml_backend_dev_t Device(ggml_backend_reg_t reg, size_t index);

ggml_backend_t BackendInit() {
  return new ggml_backend{/* .guid    = */ Guid(),
                          /* .iface   = */ kBackendInterface,
                          /* .device  = */ Device(Reg(), 0),
                          /* .context = */ new BackendContext()};
}

void SetNThreads(ggml_backend_t backend, int n_threads) {
  if (backend == nullptr || !ggml_guid_matches(backend->guid, Guid()) || n_threads < 1) return;
  static_cast<BackendContext*>(backend->context)->n_threads = n_threads;
}

// ---- device ----------------------------------------------------------------------------------

const char* DeviceName(ggml_backend_dev_t) { return kName; }

const char* DeviceDescription(ggml_backend_dev_t) {
  return "attnrt: FLASH_ATTN_EXT on attnrt's CPU kernels";
}

void DeviceMemory(ggml_backend_dev_t, size_t* free, size_t* total) {
  *free = 0;
  *total = 0;
}

enum ggml_backend_dev_type DeviceType(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_ACCEL; }

void DeviceProps(ggml_backend_dev_t dev, ggml_backend_dev_props* props) {
  props->name = DeviceName(dev);
  props->description = DeviceDescription(dev);
  props->type = DeviceType(dev);
  props->device_id = nullptr;
  DeviceMemory(dev, &props->memory_free, &props->memory_total);
  props->caps = {/* .async                = */ false,
                 /* .host_buffer          = */ false,
                 /* .buffer_from_host_ptr = */ true,
                 /* .events               = */ false,
                 /* .mmap_support         = */ true};
}

ggml_backend_t DeviceInitBackend(ggml_backend_dev_t, const char*) { return BackendInit(); }

ggml_backend_buffer_type_t DeviceBufferType(ggml_backend_dev_t) {
  return ggml_backend_cpu_buffer_type();
}

ggml_backend_buffer_t DeviceBufferFromHostPtr(ggml_backend_dev_t, void* ptr, size_t size, size_t) {
  return ggml_backend_cpu_buffer_from_ptr(ptr, size);
}

bool DeviceSupportsOp(ggml_backend_dev_t, const ggml_tensor* op) {
  switch (op->op) {
    case GGML_OP_NONE:
    case GGML_OP_RESHAPE:
    case GGML_OP_VIEW:
    case GGML_OP_PERMUTE:
    case GGML_OP_TRANSPOSE:
      return true;
    case GGML_OP_FLASH_ATTN_EXT: {
      std::string reason;
      bool served = false;
      try {
        served = Server().Supports(op, &reason);
      } catch (const std::exception& e) {
        reason = e.what();
      } catch (...) {
        reason = "unknown exception";
      }
      if (!served) NoteDecline(reason);
      return served;
    }
    default:
      return false;
  }
}

bool DeviceSupportsBuft(ggml_backend_dev_t, ggml_backend_buffer_type_t buft) {
  return ggml_backend_buft_is_host(buft);
}

const ggml_backend_device_i kDeviceInterface = {
    /* .get_name             = */ DeviceName,
    /* .get_description      = */ DeviceDescription,
    /* .get_memory           = */ DeviceMemory,
    /* .get_type             = */ DeviceType,
    /* .get_props            = */ DeviceProps,
    /* .init_backend         = */ DeviceInitBackend,
    /* .get_buffer_type      = */ DeviceBufferType,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ DeviceBufferFromHostPtr,
    /* .supports_op          = */ DeviceSupportsOp,
    /* .supports_buft        = */ DeviceSupportsBuft,
    /* .offload_op           = */ nullptr,
    /* .event_new            = */ nullptr,
    /* .event_free           = */ nullptr,
    /* .event_synchronize    = */ nullptr,
};

// ---- registry ----------------------------------------------------------------------------------

const char* RegName(ggml_backend_reg_t) { return kName; }

size_t RegDeviceCount(ggml_backend_reg_t) { return Enabled() ? 1 : 0; }

ggml_backend_dev_t Device(ggml_backend_reg_t reg, size_t index) {
  static ggml_backend_device device = {/* .iface   = */ kDeviceInterface,
                                       /* .reg     = */ reg,
                                       /* .context = */ nullptr};
  return index == 0 && Enabled() ? &device : nullptr;
}

// Counters for tests and diagnostics, reached through get_proc_address.
uint64_t NodesComputed() { return Server().nodes_computed(); }
uint64_t CausalCalls() { return Server().causal_calls(); }
uint64_t GgmlRows() { return Server().ggml_rows(); }

void* RegProcAddress(ggml_backend_reg_t, const char* name) {
  if (std::strcmp(name, "ggml_backend_set_n_threads") == 0) {
    return reinterpret_cast<void*>(SetNThreads);
  }
  if (std::strcmp(name, "attnrt_ggml_nodes_computed") == 0) {
    return reinterpret_cast<void*>(NodesComputed);
  }
  if (std::strcmp(name, "attnrt_ggml_causal_calls") == 0) {
    return reinterpret_cast<void*>(CausalCalls);
  }
  if (std::strcmp(name, "attnrt_ggml_ggml_rows") == 0) {
    return reinterpret_cast<void*>(GgmlRows);
  }
  return nullptr;
}

const ggml_backend_reg_i kRegInterface = {
    /* .get_name         = */ RegName,
    /* .get_device_count = */ RegDeviceCount,
    /* .get_device       = */ Device,
    /* .get_proc_address = */ RegProcAddress,
};

ggml_backend_reg_t Reg() {
  static ggml_backend_reg reg = {/* .api_version = */ GGML_BACKEND_API_VERSION,
                                 /* .iface       = */ kRegInterface,
                                 /* .context     = */ nullptr};
  return &reg;
}

}  // namespace
}  // namespace attnrt_ggml

extern "C" {

// ggml's loader entry points (GGML_BACKEND_DL_IMPL / GGML_BACKEND_DL_SCORE_IMPL, spelled out: this
// library is loaded by ggml builds with or without GGML_BACKEND_DL).
__attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_init(void) {
  static const bool report = attnrt_ggml::Verbose() && std::atexit(attnrt_ggml::ReportAtExit) == 0;
  (void)report;
  return attnrt_ggml::Reg();
}

__attribute__((visibility("default"))) int ggml_backend_score(void) { return 1; }
}
