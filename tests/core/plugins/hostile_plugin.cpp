// libattnrt_hostile.so: a plugin that does whatever a spec file tells it, for the tests of hostile
// plugins (tests/core/hostile_plugin_test.cpp) and the plugin fuzzer
// (tests/fuzz/plugin_fuzzer.cpp). attnrt_plugin_query reads the file named by
// ATTNRT_TEST_HOSTILE_SPEC (unset: a valid plugin with no kernels) and builds its table from it, so
// the runtime meets the behaviour through the normal discovery path. One runtime at a time: the
// next query replaces the table.
//
// The spec has one directive per line ("#" starts a comment):
//   name NAME | version TEXT | abi_major N | struct_size N     the table's fields
//   query ACTION      attnrt_plugin_query: ok (the table), null, or throw:KIND
//   init ACTION       init(): ok, status:N, throw:KIND or parallel:N:GRAIN:AT:KIND
//   probe ACTION      probe(): ok, unavailable, status:N, throw:KIND or parallel:...
//   kernel_count N    kernel_count() returns N (default: the number of kernel lines), or throw:KIND
//   kernel_throw_at I kernel(I) throws std::runtime_error; kernel(i) beyond the lines is NULL
//   shutdown ACTION   shutdown(): ok, throw:KIND or parallel:...
//   kernel NAME [op=N] [device=N] [priority=N] [supports=ACTION] [workspace=N|throw:KIND]
//          [run=ACTION]                                    one kernel (at most kMaxKernels)
// For supports, status:N is the value returned (ok is 1); for run, ok is ATTNRT_OK and status:N
// returns N with the message "hostile run status N". parallel:N:GRAIN:AT:KIND calls
// host->parallel_for(N, GRAIN) with a callback that throws KIND in the range holding index AT
// ("all": in every range, "none": never), then returns ATTNRT_OK. KIND is std
// (std::runtime_error), own (an exception class of this plugin, derived from std::exception),
// foreign (a class of this plugin not derived from std::exception) or int. Messages name the
// function that threw: "hostile init", "hostile callback", ...
// A GQA kernel's run() writes the first and the last byte of the first 4096 of its workspace, so a
// workspace smaller than it was promised is an AddressSanitizer report.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attnrt/ops/gqa.h"
#include "attnrt/plugin.h"

namespace {

constexpr size_t kMaxKernels = 64;

// Defined here only: its type information and what() live in this library.
class OwnError : public std::exception {
 public:
  explicit OwnError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

struct ForeignError {
  int code;
};

enum class Kind { kStd, kOwn, kForeign, kInt };

struct Action {
  enum Type { kOk, kNull, kUnavailable, kStatus, kThrow, kParallel } type = kOk;
  int64_t status = 0;
  Kind kind = Kind::kStd;
  uint64_t n = 0, grain = 0, at = 0;
  bool at_all = false, at_none = false;
};

struct KernelSpec {
  std::string name;
  int32_t op = ATTNRT_OP_GQA;
  int32_t device = ATTNRT_DEVICE_CPU;
  int32_t priority = 1000;
  Action supports{Action::kStatus, 1};
  bool workspace_throws = false;
  Kind workspace_kind = Kind::kStd;
  uint64_t workspace = 0;
  Action run;
};

struct Spec {
  std::string name = "hostile";
  std::string version = "0.0.1";
  uint64_t abi_major = ATTNRT_ABI_VERSION_MAJOR;
  uint64_t struct_size = sizeof(attnrt_plugin_api);
  Action query, init, probe, shutdown;
  bool count_given = false, count_throws = false;
  Kind count_kind = Kind::kStd;
  uint64_t count = 0;
  bool kernel_throws = false;
  uint64_t kernel_throw_at = 0;
  std::vector<KernelSpec> kernels;
};

Spec g_spec;
std::vector<attnrt_kernel_desc> g_descs;
attnrt_plugin_api g_api;
const attnrt_host_services* g_host = nullptr;
int g_context;

uint64_t ToU64(const std::string& text) { return std::strtoull(text.c_str(), nullptr, 0); }
int64_t ToI64(const std::string& text) { return std::strtoll(text.c_str(), nullptr, 0); }

Kind ParseKind(const std::string& text) {
  if (text == "own") return Kind::kOwn;
  if (text == "foreign") return Kind::kForeign;
  if (text == "int") return Kind::kInt;
  return Kind::kStd;
}

std::vector<std::string> Split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);) parts.push_back(part);
  return parts;
}

Action ParseAction(const std::string& text) {
  Action action;
  const std::vector<std::string> parts = Split(text, ':');
  const std::string head = parts.empty() ? "" : parts[0];
  auto part = [&](size_t i) { return i < parts.size() ? parts[i] : std::string(); };
  if (head == "null") {
    action.type = Action::kNull;
  } else if (head == "unavailable") {
    action.type = Action::kUnavailable;
  } else if (head == "status") {
    action.type = Action::kStatus;
    action.status = ToI64(part(1));
  } else if (head == "throw") {
    action.type = Action::kThrow;
    action.kind = ParseKind(part(1));
  } else if (head == "parallel") {
    action.type = Action::kParallel;
    action.n = ToU64(part(1));
    action.grain = ToU64(part(2));
    action.at_all = part(3) == "all";
    action.at_none = part(3) == "none";
    action.at = ToU64(part(3));
    action.kind = ParseKind(part(4));
  }
  return action;
}

void Throw(Kind kind, const std::string& message) {
  switch (kind) {
    case Kind::kStd:
      throw std::runtime_error(message);
    case Kind::kOwn:
      throw OwnError(message);
    case Kind::kForeign:
      throw ForeignError{7};
    case Kind::kInt:
      throw 42;
  }
}

void Callback(void* user_data, size_t begin, size_t end) {
  const Action& action = *static_cast<const Action*>(user_data);
  if (action.at_none) return;
  if (action.at_all || (action.at >= begin && action.at < end))
    Throw(action.kind, "hostile callback");
}

// Performs the throw and parallel parts of an action; returns the status the function returns.
int32_t Perform(const Action& action, const char* where) {
  if (action.type == Action::kThrow) Throw(action.kind, std::string("hostile ") + where);
  if (action.type == Action::kParallel && g_host != nullptr) {
    g_host->parallel_for(g_host->host_context, action.n, action.grain, Callback,
                         const_cast<Action*>(&action));
  }
  if (action.type == Action::kStatus) return static_cast<int32_t>(action.status);
  return ATTNRT_OK;
}

void ReadSpec() {
  g_spec = Spec{};
  const char* path = std::getenv("ATTNRT_TEST_HOSTILE_SPEC");
  if (path == nullptr) return;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    std::stringstream words(line);
    std::string key, value;
    words >> key >> value;
    if (key.empty() || key[0] == '#') continue;
    if (key == "name") g_spec.name = value;
    if (key == "version") g_spec.version = value;
    if (key == "abi_major") g_spec.abi_major = ToU64(value);
    if (key == "struct_size") g_spec.struct_size = ToU64(value);
    if (key == "query") g_spec.query = ParseAction(value);
    if (key == "init") g_spec.init = ParseAction(value);
    if (key == "probe") g_spec.probe = ParseAction(value);
    if (key == "shutdown") g_spec.shutdown = ParseAction(value);
    if (key == "kernel_count") {
      g_spec.count_given = true;
      g_spec.count_throws = value.rfind("throw", 0) == 0;
      g_spec.count_kind = ParseKind(value.size() > 6 ? value.substr(6) : "");
      g_spec.count = ToU64(value);
    }
    if (key == "kernel_throw_at") {
      g_spec.kernel_throws = true;
      g_spec.kernel_throw_at = ToU64(value);
    }
    if (key == "kernel" && g_spec.kernels.size() < kMaxKernels) {
      KernelSpec kernel;
      kernel.name = value;
      for (std::string field; words >> field;) {
        const size_t eq = field.find('=');
        if (eq == std::string::npos) continue;
        const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
        if (k == "op") kernel.op = static_cast<int32_t>(ToI64(v));
        if (k == "device") kernel.device = static_cast<int32_t>(ToI64(v));
        if (k == "priority") kernel.priority = static_cast<int32_t>(ToI64(v));
        if (k == "supports") kernel.supports = ParseAction(v == "ok" ? "status:1" : v);
        if (k == "run") kernel.run = ParseAction(v);
        if (k == "workspace") {
          kernel.workspace_throws = v.rfind("throw", 0) == 0;
          kernel.workspace_kind = ParseKind(v.size() > 6 ? v.substr(6) : "");
          kernel.workspace = ToU64(v);
        }
      }
      g_spec.kernels.push_back(kernel);
    }
  }
}

template <size_t I>
int32_t Supports(void* /*context*/, const void* /*problem*/, char* reason, size_t capacity) {
  const int32_t accepted = Perform(g_spec.kernels[I].supports, "supports");
  if (accepted != 1 && capacity > 0) std::snprintf(reason, capacity, "hostile declines");
  return accepted;
}

template <size_t I>
size_t WorkspaceSize(void* /*context*/, const void* /*problem*/) {
  const KernelSpec& kernel = g_spec.kernels[I];
  if (kernel.workspace_throws) Throw(kernel.workspace_kind, "hostile workspace_size");
  return static_cast<size_t>(kernel.workspace);
}

template <size_t I>
int32_t Run(void* /*context*/, const void* args, char* error, size_t capacity) {
  const KernelSpec& kernel = g_spec.kernels[I];
  if (kernel.op == ATTNRT_OP_GQA) {
    const auto* gqa = static_cast<const attnrt_gqa_args*>(args);
    if (gqa->workspace_size > 0 && gqa->workspace != nullptr) {
      auto* bytes = static_cast<volatile unsigned char*>(gqa->workspace);
      const size_t touched = gqa->workspace_size < 4096 ? gqa->workspace_size : 4096;
      bytes[0] = 1;
      bytes[touched - 1] = 1;
    }
  }
  const int32_t status = Perform(kernel.run, "run");
  if (status != ATTNRT_OK && capacity > 0) {
    std::snprintf(error, capacity, "hostile run status %d", static_cast<int>(status));
  }
  return status;
}

template <size_t... I>
void FillDescs(std::index_sequence<I...>) {
  using SupportsFn = int32_t (*)(void*, const void*, char*, size_t);
  using WorkspaceFn = size_t (*)(void*, const void*);
  using RunFn = int32_t (*)(void*, const void*, char*, size_t);
  static constexpr SupportsFn kSupports[] = {Supports<I>...};
  static constexpr WorkspaceFn kWorkspace[] = {WorkspaceSize<I>...};
  static constexpr RunFn kRun[] = {Run<I>...};
  g_descs.clear();
  for (size_t i = 0; i < g_spec.kernels.size(); ++i) {
    const KernelSpec& kernel = g_spec.kernels[i];
    g_descs.push_back({sizeof(attnrt_kernel_desc), kernel.name.c_str(), kernel.op, kernel.device,
                       kernel.priority, kSupports[i], kWorkspace[i], kRun[i]});
  }
}

int32_t Init(const attnrt_host_services* host, void** out_context, char* error, size_t capacity) {
  g_host = host;
  *out_context = &g_context;
  const int32_t status = Perform(g_spec.init, "init");
  if (status != ATTNRT_OK && capacity > 0) std::snprintf(error, capacity, "hostile init status");
  return status;
}

int32_t Probe(void* /*context*/, attnrt_probe_result* out) {
  const int32_t status = Perform(g_spec.probe, "probe");
  out->available = g_spec.probe.type == Action::kUnavailable ? 0 : 1;
  out->reason = g_spec.probe.type == Action::kUnavailable ? "hostile unavailable" : "";
  return status;
}

size_t KernelCount(void* /*context*/) {
  if (g_spec.count_throws) Throw(g_spec.count_kind, "hostile kernel_count");
  return g_spec.count_given ? static_cast<size_t>(g_spec.count) : g_descs.size();
}

const attnrt_kernel_desc* Kernel(void* /*context*/, size_t index) {
  if (g_spec.kernel_throws && index == g_spec.kernel_throw_at) {
    throw std::runtime_error("hostile kernel");
  }
  return index < g_descs.size() ? &g_descs[index] : nullptr;
}

void Shutdown(void* /*context*/) {
  Perform(g_spec.shutdown, "shutdown");
  g_host = nullptr;
}

}  // namespace

extern "C" ATTNRT_PLUGIN_EXPORT const attnrt_plugin_api* attnrt_plugin_query(
    uint32_t /*host_abi_major*/, uint32_t /*host_abi_minor*/) {
  ReadSpec();
  FillDescs(std::make_index_sequence<kMaxKernels>());
  g_api = attnrt_plugin_api{static_cast<size_t>(g_spec.struct_size),
                            static_cast<uint32_t>(g_spec.abi_major),
                            ATTNRT_ABI_VERSION_MINOR,
                            g_spec.name.c_str(),
                            g_spec.version.c_str(),
                            Init,
                            Probe,
                            KernelCount,
                            Kernel,
                            Shutdown};
  Perform(g_spec.query, "attnrt_plugin_query");
  return g_spec.query.type == Action::kNull ? nullptr : &g_api;
}
