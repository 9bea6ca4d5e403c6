// GroupQueryAttention kernels of libattnrt_onnxruntime.so (docs/onnxruntime.md). Nothing throws out
// of these functions: every failure becomes an OrtStatus naming the node.
#include "gqa_kernel.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "attnrt/ops/gqa.h"

// Runs of every GroupQueryAttention node served by this library, for tests and diagnostics.
static std::atomic<uint64_t> g_runs{0};
extern "C" __attribute__((visibility("default"))) uint64_t attnrt_onnxruntime_runs(void) {
  return g_runs.load(std::memory_order_relaxed);
}

namespace attnrt_ort {
namespace {

constexpr size_t kNumInputs = ATTNRT_GQA_NUM_INPUTS;
constexpr size_t kNumOutputs = ATTNRT_GQA_NUM_OUTPUTS;

// A test-only fault (ATTNRT_ONNXRUNTIME_TEST_FAULT=output, read once): adds 1 to the first output
// element after each run, so that a comparison with ONNX Runtime's own kernel must fail.
bool TestFaultOutput() {
  static const bool on = [] {
    const char* v = std::getenv("ATTNRT_ONNXRUNTIME_TEST_FAULT");
    return v != nullptr && std::strcmp(v, "output") == 0;
  }();
  return on;
}

struct GqaKernel {
  const OrtApi* api = nullptr;
  std::string node_name;
  ONNXTensorElementDataType cache_type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  attnrt_gqa_attributes attributes{};
  attnrt_op* op = nullptr;
  ~GqaKernel() { attnrt_op_destroy(op); }
};

// Takes ownership of an OrtStatus: returns its message and releases it ("" for success).
std::string Consume(const OrtApi* api, OrtStatus* status) {
  if (status == nullptr) return {};
  std::string message = api->GetErrorMessage(status);
  api->ReleaseStatus(status);
  return message.empty() ? std::string("(no message)") : message;
}

std::string AttnrtError(attnrt_status status) {
  return std::string("attnrt: ") + attnrt_status_name(status) + ": " + attnrt_last_error_message();
}

bool ToDtype(ONNXTensorElementDataType type, attnrt_dtype* out) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      *out = ATTNRT_DTYPE_FLOAT32;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
      *out = ATTNRT_DTYPE_FLOAT16;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
      *out = ATTNRT_DTYPE_BFLOAT16;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      *out = ATTNRT_DTYPE_INT8;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      *out = ATTNRT_DTYPE_UINT8;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
      *out = ATTNRT_DTYPE_INT32;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
      *out = ATTNRT_DTYPE_INT64;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN:
      *out = ATTNRT_DTYPE_FLOAT8_E4M3FN;
      return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2:
      *out = ATTNRT_DTYPE_FLOAT8_E5M2;
      return true;
    default:
      return false;
  }
}

// An int attribute into an int32 field; absent keeps the default.
std::string ReadInt(const OrtApi* api, const OrtKernelInfo* info, const char* name, int32_t* out,
                    bool required) {
  int64_t value = 0;
  OrtStatus* status = api->KernelInfoGetAttribute_int64(info, name, &value);
  if (status != nullptr) {
    api->ReleaseStatus(status);
    return required ? std::string("attribute ") + name + " is required and missing" : "";
  }
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    return std::string("attribute ") + name + ": expected a 32-bit integer, got " +
           std::to_string(value);
  }
  *out = static_cast<int32_t>(value);
  return {};
}

void ReadFloat(const OrtApi* api, const OrtKernelInfo* info, const char* name, float* out) {
  float value = 0.0f;
  OrtStatus* status = api->KernelInfoGetAttribute_float(info, name, &value);
  if (status != nullptr) {
    api->ReleaseStatus(status);
    return;
  }
  *out = value;
}

// k_quant_type / v_quant_type: "NONE", "PER_TENSOR" or "PER_CHANNEL" (absent: NONE).
std::string ReadQuantType(const OrtApi* api, const OrtKernelInfo* info, const char* name,
                          int32_t* out) {
  size_t size = 0;
  OrtStatus* status = api->KernelInfoGetAttribute_string(info, name, nullptr, &size);
  if (status != nullptr) {
    api->ReleaseStatus(status);
    return {};
  }
  std::string value(size, '\0');
  status = api->KernelInfoGetAttribute_string(info, name, value.data(), &size);
  if (status != nullptr) return std::string("attribute ") + name + ": " + Consume(api, status);
  value.resize(std::strlen(value.c_str()));
  if (value == "NONE") {
    *out = ATTNRT_GQA_QUANT_NONE;
  } else if (value == "PER_TENSOR") {
    *out = ATTNRT_GQA_QUANT_PER_TENSOR;
  } else if (value == "PER_CHANNEL") {
    *out = ATTNRT_GQA_QUANT_PER_CHANNEL;
  } else {
    return std::string("attribute ") + name +
           ": expected \"NONE\", \"PER_TENSOR\" or \"PER_CHANNEL\", got \"" + value + "\"";
  }
  return {};
}

std::string ReadAttributes(const OrtApi* api, const OrtKernelInfo* info, attnrt_gqa_attributes* a) {
  attnrt_gqa_attributes_init(a);
  struct IntAttribute {
    const char* name;
    int32_t* field;
    bool required;
  };
  const IntAttribute ints[] = {
      {"num_heads", &a->num_heads, true},
      {"kv_num_heads", &a->kv_num_heads, true},
      {"causal", &a->causal, false},
      {"local_window_size", &a->local_window_size, false},
      {"sliding_window_cache", &a->sliding_window_cache, false},
      {"do_rotary", &a->do_rotary, false},
      {"rotary_interleaved", &a->rotary_interleaved, false},
      {"smooth_softmax", &a->smooth_softmax, false},
      {"qk_output", &a->qk_output, false},
      {"kv_cache_bit_width", &a->kv_cache_bit_width, false},
  };
  for (const IntAttribute& attribute : ints) {
    std::string error = ReadInt(api, info, attribute.name, attribute.field, attribute.required);
    if (!error.empty()) return error;
  }
  ReadFloat(api, info, "scale", &a->scale);
  ReadFloat(api, info, "softcap", &a->softcap);
  ReadFloat(api, info, "qk_norm_epsilon", &a->qk_norm_epsilon);
  std::string error = ReadQuantType(api, info, "k_quant_type", &a->k_quant_type);
  if (error.empty()) error = ReadQuantType(api, info, "v_quant_type", &a->v_quant_type);
  return error;
}

std::string NodeName(const OrtApi* api, const OrtKernelInfo* info) {
  size_t size = 0;
  OrtStatus* status = api->KernelInfo_GetNodeName(info, nullptr, &size);
  if (status != nullptr || size == 0) {
    Consume(api, status);
    return "";
  }
  std::string name(size, '\0');
  if (!Consume(api, api->KernelInfo_GetNodeName(info, name.data(), &size)).empty()) return "";
  name.resize(std::strlen(name.c_str()));
  return name;
}

// One input or output of a run, as attnrt sees it.
struct Slot {
  attnrt_tensor tensor{};
  std::vector<int64_t> shape;
  bool present = false;
};

// Fills `slot` from an OrtValue (data, dtype, shape); returns an error message or "".
std::string Describe(const OrtApi* api, const OrtValue* value, const char* name, Slot* slot) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  std::string error = Consume(api, api->GetTensorTypeAndShape(value, &info));
  if (!error.empty()) return std::string(name) + ": " + error;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  size_t ndim = 0;
  error = Consume(api, api->GetTensorElementType(info, &type));
  if (error.empty()) error = Consume(api, api->GetDimensionsCount(info, &ndim));
  if (error.empty()) {
    slot->shape.assign(ndim, 0);
    error = Consume(api, api->GetDimensions(info, slot->shape.data(), ndim));
  }
  api->ReleaseTensorTypeAndShapeInfo(info);
  if (!error.empty()) return std::string(name) + ": " + error;
  void* data = nullptr;
  error = Consume(api, api->GetTensorMutableData(const_cast<OrtValue*>(value), &data));
  if (!error.empty()) return std::string(name) + ": " + error;
  attnrt_dtype dtype{};
  if (!ToDtype(type, &dtype)) {
    return std::string(name) + ": element type " + std::to_string(static_cast<int>(type)) +
           " (ONNXTensorElementDataType) is not one attnrt serves";
  }
  slot->tensor = attnrt_tensor{data,  {ATTNRT_DEVICE_CPU, 0}, static_cast<int32_t>(ndim),
                               dtype, slot->shape.data(),     nullptr,
                               0};
  slot->present = true;
  return {};
}

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string text = "(";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? "," : "") + std::to_string(dims[i]);
  return text + ")";
}

// The outputs' shapes for these inputs (ONNX Runtime's): output (B,S,N*H); present_key/value
// (B,Nkv,max(T,P),H) (P rows with sliding_window_cache = 1; H/2 bytes for a 4-bit cache);
// output_qk (B,N,S,T). Shapes the inputs cannot give are reported; attnrt checks the rest.
std::string OutputShapes(const GqaKernel& k, const std::array<Slot, kNumInputs>& in,
                         std::array<std::vector<int64_t>, kNumOutputs>* shapes) {
  const Slot& query = in[ATTNRT_GQA_INPUT_QUERY];
  if (query.shape.size() != 3) {
    return "query: expected 3 dimensions (batch_size, sequence_length, hidden_size), got " +
           DimsText(query.shape);
  }
  const attnrt_gqa_attributes& a = k.attributes;
  const bool packed = !in[ATTNRT_GQA_INPUT_KEY].present;
  const int64_t heads = packed ? int64_t{a.num_heads} + 2 * int64_t{a.kv_num_heads} : a.num_heads;
  const int64_t b = query.shape[0], s = query.shape[1], h = query.shape[2] / heads;
  int64_t t = 0;
  const Slot& total = in[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH];
  if (total.present && total.tensor.dtype.code == ATTNRT_DTYPE_CODE_INT &&
      total.tensor.dtype.bits == 32 && total.tensor.data != nullptr) {
    int64_t count = 1;
    for (int64_t d : total.shape) count *= d;
    if (count == 1) t = std::max<int64_t>(0, *static_cast<const int32_t*>(total.tensor.data));
  }
  int64_t p = 0, cache_h = k.cache_type == ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 ? h / 2 : h;
  const Slot& past = in[ATTNRT_GQA_INPUT_PAST_KEY];
  if (past.present) {
    if (past.shape.size() != 4) {
      return "past_key: expected 4 dimensions (batch_size, kv_num_heads, past_sequence_length, "
             "head_size), got " +
             DimsText(past.shape);
    }
    p = past.shape[2];
    cache_h = past.shape[3];
  }
  const int64_t rows = a.sliding_window_cache == 1 ? p : std::max(t, p);
  (*shapes)[ATTNRT_GQA_OUTPUT_OUTPUT] = {b, s, int64_t{a.num_heads} * h};
  (*shapes)[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = {b, a.kv_num_heads, rows, cache_h};
  (*shapes)[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = {b, a.kv_num_heads, rows, cache_h};
  (*shapes)[ATTNRT_GQA_OUTPUT_OUTPUT_QK] = {b, a.num_heads, s, t};
  return {};
}

OrtStatus* Compute(GqaKernel& k, OrtKernelContext* context) {
  const OrtApi* api = k.api;
  std::array<Slot, kNumInputs> in;
  size_t num_inputs = 0, num_outputs = 0;
  std::string error = Consume(api, api->KernelContext_GetInputCount(context, &num_inputs));
  if (error.empty()) error = Consume(api, api->KernelContext_GetOutputCount(context, &num_outputs));
  if (!error.empty()) return NodeError(api, k.node_name, error);
  for (size_t i = 0; i < std::min(num_inputs, kNumInputs); ++i) {
    const OrtValue* value = nullptr;
    error = Consume(api, api->KernelContext_GetInput(context, i, &value));
    if (error.empty() && value != nullptr) {
      error = Describe(api, value, attnrt_op_input_name(ATTNRT_OP_GQA, i), &in[i]);
    }
    if (!error.empty()) return NodeError(api, k.node_name, error, ORT_INVALID_ARGUMENT);
  }
  std::array<std::vector<int64_t>, kNumOutputs> shapes;
  error = OutputShapes(k, in, &shapes);
  if (!error.empty()) return NodeError(api, k.node_name, error, ORT_INVALID_ARGUMENT);
  std::array<Slot, kNumOutputs> out;
  for (size_t i = 0; i < std::min(num_outputs, kNumOutputs); ++i) {
    if (i == ATTNRT_GQA_OUTPUT_OUTPUT_QK && k.attributes.qk_output == ATTNRT_GQA_QK_OUTPUT_NONE) {
      continue;  // attnrt refuses output_qk without qk_output; ORT leaves it unallocated too
    }
    OrtValue* value = nullptr;
    error = Consume(
        api, api->KernelContext_GetOutput(context, i, shapes[i].data(), shapes[i].size(), &value));
    if (error.empty() && value != nullptr) {
      error = Describe(api, value, attnrt_op_output_name(ATTNRT_OP_GQA, i), &out[i]);
    }
    if (!error.empty()) return NodeError(api, k.node_name, error);
  }

  std::array<const attnrt_tensor*, kNumInputs> inputs{};
  std::array<const attnrt_tensor*, kNumOutputs> outputs{};
  for (size_t i = 0; i < kNumInputs; ++i) inputs[i] = in[i].present ? &in[i].tensor : nullptr;
  for (size_t i = 0; i < kNumOutputs; ++i) outputs[i] = out[i].present ? &out[i].tensor : nullptr;
  attnrt_plan* plan = nullptr;
  attnrt_status status =
      attnrt_op_plan(k.op, inputs.data(), kNumInputs, outputs.data(), kNumOutputs, &plan);
  if (status == ATTNRT_OK) {
    status = attnrt_plan_run(plan, inputs.data(), kNumInputs, outputs.data(), kNumOutputs, nullptr,
                             0, nullptr);
  }
  if (status != ATTNRT_OK) {
    const std::string message = AttnrtError(status);
    attnrt_plan_release(plan);
    const bool invalid = status == ATTNRT_ERROR_INVALID_ARGUMENT ||
                         status == ATTNRT_ERROR_UNSUPPORTED || status == ATTNRT_ERROR_PLAN_MISMATCH;
    return NodeError(api, k.node_name, message, invalid ? ORT_INVALID_ARGUMENT : ORT_FAIL);
  }
  attnrt_plan_release(plan);
  g_runs.fetch_add(1, std::memory_order_relaxed);
  if (TestFaultOutput() && out[0].present) {
    const attnrt_tensor& o = out[0].tensor;
    if (o.dtype.code == ATTNRT_DTYPE_CODE_FLOAT && o.dtype.bits == 32) {
      static_cast<float*>(o.data)[0] += 1.0f;
    } else {
      static_cast<uint8_t*>(o.data)[1] ^= 0x40;  // float16/bfloat16: flips an exponent bit
    }
  }
  return nullptr;
}

}  // namespace

OrtStatus* NodeError(const OrtApi* api, const std::string& node_name, const std::string& message,
                     OrtErrorCode code) {
  const std::string text = "attnrt GroupQueryAttention node '" + node_name + "': " + message;
  return api->CreateStatus(code, text.c_str());
}

attnrt_runtime* SharedRuntime(int32_t num_threads, std::string& error) {
  static std::mutex mutex;
  // Never destroyed: kernels of live sessions use them until the process ends (the library is
  // linked with -z nodelete, so it is never unloaded under them).
  static auto* runtimes = new std::map<int32_t, attnrt_runtime*>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = runtimes->find(num_threads);
  if (it != runtimes->end()) return it->second;
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads = num_threads;
  attnrt_runtime* runtime = nullptr;
  const attnrt_status status = attnrt_runtime_create(&options, &runtime);
  if (status != ATTNRT_OK) {
    error = AttnrtError(status);
    return nullptr;
  }
  runtimes->emplace(num_threads, runtime);
  return runtime;
}

OrtStatus* ORT_API_CALL CreateGqaKernel(const OrtCustomOp* op, const OrtApi* api,
                                        const OrtKernelInfo* info, void** kernel) noexcept {
  try {
    const auto* custom = reinterpret_cast<const GqaCustomOp*>(op);
    auto k = std::make_unique<GqaKernel>();
    k->api = api;
    k->node_name = NodeName(api, info);
    k->cache_type = custom->cache_type;
    std::string error = ReadAttributes(api, info, &k->attributes);
    if (!error.empty()) return NodeError(api, k->node_name, error, ORT_INVALID_ARGUMENT);
    attnrt_runtime* runtime = SharedRuntime(custom->num_threads, error);
    if (runtime == nullptr) return NodeError(api, k->node_name, error);
    const attnrt_status status = attnrt_op_create(runtime, ATTNRT_OP_GQA, &k->attributes, &k->op);
    if (status != ATTNRT_OK) {
      return NodeError(api, k->node_name, AttnrtError(status),
                       status == ATTNRT_ERROR_INVALID_ARGUMENT ? ORT_INVALID_ARGUMENT : ORT_FAIL);
    }
    *kernel = k.release();
    return nullptr;
  } catch (const std::bad_alloc&) {
    return api->CreateStatus(ORT_FAIL, "attnrt GroupQueryAttention: out of memory");
  } catch (...) {
    return api->CreateStatus(ORT_FAIL, "attnrt GroupQueryAttention: unexpected error");
  }
}

OrtStatus* ORT_API_CALL ComputeGqaKernel(void* kernel, OrtKernelContext* context) noexcept {
  auto* k = static_cast<GqaKernel*>(kernel);
  try {
    return Compute(*k, context);
  } catch (const std::bad_alloc&) {
    return NodeError(k->api, k->node_name, "out of memory");
  } catch (...) {
    return NodeError(k->api, k->node_name, "unexpected error");
  }
}

void ORT_API_CALL DestroyGqaKernel(void* kernel) noexcept {
  delete static_cast<GqaKernel*>(kernel);
}

}  // namespace attnrt_ort
