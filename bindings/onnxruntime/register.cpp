// libattnrt_onnxruntime.so: an ONNX Runtime custom-op library whose RegisterCustomOps adds
// com.microsoft.GroupQueryAttention run by attnrt (docs/onnxruntime.md). C API only: every ONNX
// Runtime call goes through the OrtApi table ONNX Runtime hands over, requested at the version
// these headers declare (ORT_API_VERSION), so the library needs no ONNX Runtime library to link
// against.
#include <onnxruntime_c_api.h>
#include <charconv>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <new>
#include <string>

#include "gqa_kernel.h"

namespace attnrt_ort {
namespace {

constexpr const char* kDomain = "com.microsoft";
constexpr const char* kOpName = "GroupQueryAttention";
constexpr const char* kNumThreadsKey = "attnrt.num_threads";
// Set on the session options by a registration: ONNX Runtime refuses a second domain of the same
// name on one set of options ("Domain already set in registry"), so registering again is a no-op.
constexpr const char* kRegisteredKey = "attnrt.onnxruntime.registered";

// ONNX Runtime's input and output positions of the op; T query type, C cache type.
enum class Kind { kT, kCache, kInt32, kInt64, kFloat };
constexpr Kind kInputKinds[] = {
    Kind::kT,     Kind::kT,     Kind::kT, Kind::kCache, Kind::kCache, Kind::kInt32,
    Kind::kInt32, Kind::kT,     Kind::kT, Kind::kInt64, Kind::kT,     Kind::kT,
    Kind::kFloat, Kind::kFloat, Kind::kT, Kind::kT};  // ... q_norm_weight, k_norm_weight
constexpr Kind kOutputKinds[] = {Kind::kT, Kind::kCache, Kind::kCache, Kind::kT};
constexpr size_t kNumInputs = sizeof(kInputKinds) / sizeof(kInputKinds[0]);
constexpr size_t kNumOutputs = sizeof(kOutputKinds) / sizeof(kOutputKinds[0]);
// Required: query, seqlens_k, total_sequence_length, output. Everything else is optional.
constexpr bool InputRequired(size_t i) { return i == 0 || i == 5 || i == 6; }

// T and T_CACHE of the schema: one OrtCustomOp per pair, so that every node's types are matched
// by a kernel of this library (a pair attnrt does not serve fails with attnrt's message).
constexpr ONNXTensorElementDataType kQueryTypes[] = {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
                                                     ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
                                                     ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16};
constexpr ONNXTensorElementDataType kCacheTypes[] = {
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN};
constexpr size_t kNumOps =
    (sizeof(kQueryTypes) / sizeof(kQueryTypes[0])) * (sizeof(kCacheTypes) / sizeof(kCacheTypes[0]));

const GqaCustomOp* Self(const OrtCustomOp* op) { return reinterpret_cast<const GqaCustomOp*>(op); }

ONNXTensorElementDataType TypeOf(const GqaCustomOp* op, Kind kind) {
  switch (kind) {
    case Kind::kT:
      return op->query_type;
    case Kind::kCache:
      return op->cache_type;
    case Kind::kInt32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    case Kind::kInt64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    case Kind::kFloat:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

const char* ORT_API_CALL GetName(const OrtCustomOp*) noexcept { return kOpName; }
const char* ORT_API_CALL GetExecutionProviderType(const OrtCustomOp*) noexcept {
  return nullptr;  // the CPU execution provider
}
size_t ORT_API_CALL GetInputTypeCount(const OrtCustomOp*) noexcept { return kNumInputs; }
size_t ORT_API_CALL GetOutputTypeCount(const OrtCustomOp*) noexcept { return kNumOutputs; }
ONNXTensorElementDataType ORT_API_CALL GetInputType(const OrtCustomOp* op, size_t i) noexcept {
  return i < kNumInputs ? TypeOf(Self(op), kInputKinds[i])
                        : ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}
ONNXTensorElementDataType ORT_API_CALL GetOutputType(const OrtCustomOp* op, size_t i) noexcept {
  return i < kNumOutputs ? TypeOf(Self(op), kOutputKinds[i])
                         : ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}
OrtCustomOpInputOutputCharacteristic ORT_API_CALL GetInputCharacteristic(const OrtCustomOp*,
                                                                         size_t i) noexcept {
  return InputRequired(i) ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
}
OrtCustomOpInputOutputCharacteristic ORT_API_CALL GetOutputCharacteristic(const OrtCustomOp*,
                                                                          size_t i) noexcept {
  return i == 0 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
}
OrtMemType ORT_API_CALL GetInputMemoryType(const OrtCustomOp*, size_t) noexcept {
  return OrtMemTypeDefault;
}
int ORT_API_CALL GetVariadicMinArity(const OrtCustomOp*) noexcept { return 1; }
int ORT_API_CALL GetVariadicHomogeneity(const OrtCustomOp*) noexcept { return 1; }
int ORT_API_CALL GetStartVersion(const OrtCustomOp*) noexcept { return 1; }
int ORT_API_CALL GetEndVersion(const OrtCustomOp*) noexcept { return INT_MAX; }

void InitOp(GqaCustomOp* op, const OrtApi* api, ONNXTensorElementDataType query_type,
            ONNXTensorElementDataType cache_type, int32_t num_threads) {
  *op = GqaCustomOp{};
  OrtCustomOp& base = op->base;
  base.version = ORT_API_VERSION;
  base.GetName = GetName;
  base.GetExecutionProviderType = GetExecutionProviderType;
  base.GetInputType = GetInputType;
  base.GetInputTypeCount = GetInputTypeCount;
  base.GetOutputType = GetOutputType;
  base.GetOutputTypeCount = GetOutputTypeCount;
  base.KernelDestroy = DestroyGqaKernel;
  base.GetInputCharacteristic = GetInputCharacteristic;
  base.GetOutputCharacteristic = GetOutputCharacteristic;
  base.GetInputMemoryType = GetInputMemoryType;
  base.GetVariadicInputMinArity = GetVariadicMinArity;
  base.GetVariadicInputHomogeneity = GetVariadicHomogeneity;
  base.GetVariadicOutputMinArity = GetVariadicMinArity;
  base.GetVariadicOutputHomogeneity = GetVariadicHomogeneity;
  base.CreateKernelV2 = CreateGqaKernel;
  base.KernelComputeV2 = ComputeGqaKernel;
  base.GetStartVersion = GetStartVersion;
  base.GetEndVersion = GetEndVersion;
  op->query_type = query_type;
  op->cache_type = cache_type;
  op->api = api;
  op->num_threads = num_threads;
}

// attnrt.num_threads of the session options: 0 (default, attnrt's default) or a positive count.
// The most threads a runtime takes (attnrt_runtime_options.num_threads).
constexpr int32_t kMaxThreads = 1024;

OrtStatus* NumThreads(const OrtApi* api, const OrtSessionOptions* options, int32_t* out) {
  *out = 0;
  int has = 0;
  if (OrtStatus* status = api->HasSessionConfigEntry(options, kNumThreadsKey, &has)) return status;
  if (!has) return nullptr;
  size_t size = 0;
  if (OrtStatus* status = api->GetSessionConfigEntry(options, kNumThreadsKey, nullptr, &size)) {
    return status;
  }
  std::string value(size, '\0');
  if (OrtStatus* status =
          api->GetSessionConfigEntry(options, kNumThreadsKey, value.data(), &size)) {
    return status;
  }
  value.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  // Decimal digits only (no sign, no spaces), within the runtime's range: refused here, naming the
  // entry, rather than by the runtime at session creation.
  int32_t parsed = -1;
  const char* last = value.data() + value.size();
  const auto [end, error] = std::from_chars(value.data(), last, parsed);
  if (value.empty() || value[0] == '-' || error != std::errc() || end != last || parsed < 0 ||
      parsed > kMaxThreads) {
    const std::string message = std::string("attnrt: session config entry ") + kNumThreadsKey +
                                ": expected an integer in [0, " + std::to_string(kMaxThreads) +
                                "] (0: attnrt's default), got \"" + value + "\"";
    return api->CreateStatus(ORT_INVALID_ARGUMENT, message.c_str());
  }
  *out = static_cast<int32_t>(parsed);
  return nullptr;
}

OrtStatus* Register(OrtSessionOptions* options, const OrtApi* api) {
  int registered = 0;
  if (OrtStatus* status = api->HasSessionConfigEntry(options, kRegisteredKey, &registered)) {
    return status;
  }
  if (registered) return nullptr;
  int32_t num_threads = 0;
  if (OrtStatus* status = NumThreads(api, options, &num_threads)) return status;
  // The ops and the domain must outlive every session made with these options, which the library
  // cannot see: they are kept until the process ends (a few hundred bytes per registration).
  auto* ops = new GqaCustomOp[kNumOps];
  size_t n = 0;
  // For each query type the op whose cache type is the query's comes first: ONNX Runtime infers
  // a node's output types from the first op whose input types match, so a node without past_key
  // gets present outputs of the query's type, as with ONNX Runtime's own schema.
  for (ONNXTensorElementDataType query_type : kQueryTypes) {
    InitOp(&ops[n++], api, query_type, query_type, num_threads);
    for (ONNXTensorElementDataType cache_type : kCacheTypes) {
      if (cache_type != query_type) InitOp(&ops[n++], api, query_type, cache_type, num_threads);
    }
  }
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* status = api->CreateCustomOpDomain(kDomain, &domain)) return status;
  for (size_t i = 0; i < kNumOps; ++i) {
    if (OrtStatus* status = api->CustomOpDomain_Add(domain, &ops[i].base)) return status;
  }
  if (OrtStatus* status = api->AddCustomOpDomain(options, domain)) return status;
  return api->AddSessionConfigEntry(options, kRegisteredKey, "1");
}

}  // namespace
}  // namespace attnrt_ort

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  if (api_base == nullptr) return nullptr;  // nothing to report through
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr) {
    // The first API version has CreateStatus; every ONNX Runtime serves it.
    const OrtApi* oldest = api_base->GetApi(1);
    const std::string message =
        std::string("libattnrt_onnxruntime.so needs ONNX Runtime's C API version ") +
        std::to_string(ORT_API_VERSION) + " (onnxruntime 1." + std::to_string(ORT_API_VERSION) +
        " or newer); this ONNX Runtime is " + api_base->GetVersionString();
    return oldest != nullptr ? oldest->CreateStatus(ORT_FAIL, message.c_str()) : nullptr;
  }
  try {
    return attnrt_ort::Register(options, api);
  } catch (const std::bad_alloc&) {
    return api->CreateStatus(ORT_FAIL, "attnrt: out of memory registering GroupQueryAttention");
  } catch (...) {
    return api->CreateStatus(ORT_FAIL, "attnrt: unexpected error registering GroupQueryAttention");
  }
}
