// GPU check of the CUDA GroupQueryAttention kernels (run by bench/gpu/check.sh on a GPU machine).
//
// Part 1, correctness: every CUDA kernel (pinned one at a time through the runtime) over a matrix
// of shapes and options, on fresh seeded random inputs with poisoned outputs (NaN bytes), against
// the float64 reference of tests/common (gqa-semantics.md §3). Output and present caches are
// compared element by element; any unwritten element shows as NaN.
// Part 2, performance: each kernel timed with CUDA events, the L2 cache flushed before every
// sample, reported as TFLOP/s (visible query-key pairs x 4 H) and GB/s (bytes the kernel must
// move) next to the device's measured copy bandwidth (device-to-device cudaMemcpy) and matrix-
// product rate (cuBLAS bf16 GEMM, fp32 accumulation).
//
// Exit status 0 only when every check passed. Usage: attnrt_gqa_cuda_check [--quick]
// (ATTNRT_CHECK_SEED fixes the seed; it is printed either way).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"
#include "common/dtype_reference.h"
#include "common/gqa_reference.h"

namespace {

using attnrt_test::FloatFormat;

#define CHECK_CUDA(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t check_status_ = (expr);                                                \
    if (check_status_ != cudaSuccess) {                                                      \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorName(check_status_) + \
                               ": " + cudaGetErrorString(check_status_));                    \
    }                                                                                        \
  } while (0)

void CheckAttnrt(attnrt_status status, const char* what) {
  if (status != ATTNRT_OK) {
    throw std::runtime_error(std::string(what) + ": " + attnrt_status_name(status) + ": " +
                             attnrt_last_error_message());
  }
}

enum class Cache { kSame, kInt8, kFp8 };

struct Case {
  std::string name;
  std::vector<std::string> kernels;  // each is pinned and must be the one planned
  int64_t B = 1, S = 1, N = 8, Nkv = 2, H = 128;
  int64_t L = -1;  // new K/V rows; -1: S (0: shared KV, the past supplies every row)
  int64_t P = 0;   // past rows (0 with has_past false: no past inputs)
  bool has_past = false;
  bool shared = false;  // present is the past buffer
  bool has_present = true;
  int64_t T = 1;
  std::vector<int32_t> seqlens;
  bool bf16 = false;
  Cache cache = Cache::kSame;
  int32_t causal = 1, window = -1;
  float softcap = 0.0f;
  bool bias = false, bias_broadcast = false, sink = false, smooth = false;
  int rotary = 0;  // 0 none, 1 half-split, 2 interleaved
  bool position_ids = false, packed = false;
};

// ---- host encodings ----------------------------------------------------------------------------
uint16_t Encode16(bool bf16, float x) {
  return bf16 ? attnrt_test::BFloat16Bits(x) : attnrt_test::Float16Bits(x);
}
float Decode16(bool bf16, uint16_t bits) {
  return bf16 ? attnrt_test::BFloat16Value(bits) : attnrt_test::Float16Value(bits);
}
float Round16(bool bf16, float x) {
  return attnrt_test::RoundToFormat(bf16 ? FloatFormat::kBFloat16 : FloatFormat::kFloat16, x);
}
attnrt_test::CacheFormat CacheFormatOf(Cache c) {
  return c == Cache::kInt8 ? attnrt_test::CacheFormat::kInt8
                           : attnrt_test::CacheFormat::kFloat8E4M3Fn;
}

// A device buffer.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n > 0) CHECK_CUDA(cudaMalloc(&ptr, n));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    if (host.size() * sizeof(T) != bytes) throw std::runtime_error("upload size mismatch");
    if (bytes > 0) CHECK_CUDA(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes / sizeof(T));
    if (bytes > 0) CHECK_CUDA(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return host;
  }
};

// One GQA call's tensors on the device plus their float (reference) values.
struct Workload {
  Case c;
  int64_t L = 0, PL = 0, qrow = 0, M = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
  std::vector<float> query, key, value, past_key, past_value, cos, sin, bias, sink;
  std::vector<int64_t> positions;
  std::vector<uint16_t> query16, key16, value16, cos16, sin16, bias16, sink16;
  std::vector<uint8_t> past_k_bytes, past_v_bytes;  // cache encoding (2 bytes/elem for kSame)
  std::vector<DeviceBuffer*> owned;
  DeviceBuffer *d_query = nullptr, *d_key = nullptr, *d_value = nullptr, *d_past_k = nullptr,
               *d_past_v = nullptr, *d_cos = nullptr, *d_sin = nullptr, *d_pos = nullptr,
               *d_bias = nullptr, *d_sink = nullptr, *d_kscale = nullptr, *d_vscale = nullptr,
               *d_out = nullptr, *d_pres_k = nullptr, *d_pres_v = nullptr;
  Workload() = default;
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;
  ~Workload() {
    for (DeviceBuffer* b : owned) delete b;
  }
  DeviceBuffer* Make(size_t bytes) {
    owned.push_back(new DeviceBuffer(bytes));
    return owned.back();
  }
  int64_t CacheElem() const { return c.cache == Cache::kSame ? 2 : 1; }
};

std::vector<float> RandomRounded(std::mt19937_64& rng, size_t n, float sigma, bool bf16) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = Round16(bf16, normal(rng));
  return v;
}

std::vector<uint16_t> Encode(bool bf16, const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Encode16(bf16, v[i]);
  return out;
}

// Builds inputs (values, encodings, device copies) and poisons the outputs.
void Build(Workload& w, std::mt19937_64& rng, bool perf) {
  const Case& c = w.c;
  const bool bf = c.bf16;
  w.L = c.L >= 0 ? c.L : c.S;
  w.PL = c.has_present ? (c.shared ? c.P : std::max(c.T, c.P)) : 0;
  w.qrow = c.packed ? (c.N + 2 * c.Nkv) * c.H : c.N * c.H;
  w.M = std::max(c.T, c.P);
  const size_t kv = static_cast<size_t>(c.B * w.L * c.Nkv * c.H);
  w.query = RandomRounded(rng, static_cast<size_t>(c.B * c.S * w.qrow), 0.5f, bf);
  if (!c.packed) {
    w.key = RandomRounded(rng, kv, 0.5f, bf);
    w.value = RandomRounded(rng, kv, 1.0f, bf);
  }
  const size_t past = static_cast<size_t>(c.B * c.Nkv * c.P * c.H);
  if (perf) {
    // Timing only: the past is a constant byte pattern on the device (0x3C3C is about 1.06 in
    // float16, 0.0115 in bfloat16; 0x3C is 60 in int8 and 1.5 in e4m3), no host copy.
    if (c.cache != Cache::kSame) w.k_scale = w.v_scale = 0.01f;
  } else if (c.cache != Cache::kSame) {
    w.k_scale = c.cache == Cache::kInt8 ? 0.02f : 0.01f;
    w.v_scale = c.cache == Cache::kInt8 ? 0.025f : 0.0125f;
    w.past_k_bytes.resize(past);
    w.past_v_bytes.resize(past);
    w.past_key.resize(past);
    w.past_value.resize(past);
    std::uniform_int_distribution<int> code(0, 255);
    const auto format = CacheFormatOf(c.cache);
    for (size_t i = 0; i < past; ++i) {
      for (int which = 0; which < 2; ++which) {
        uint8_t byte;
        do {
          byte = static_cast<uint8_t>(code(rng));
        } while ((c.cache == Cache::kFp8 && (byte & 0x7F) == 0x7F) ||
                 (c.cache == Cache::kInt8 && byte == 0x80));
        auto& bytes = which == 0 ? w.past_k_bytes : w.past_v_bytes;
        auto& values = which == 0 ? w.past_key : w.past_value;
        bytes[i] = byte;
        values[i] = static_cast<float>(
            attnrt_test::DequantizeElement(format, byte, which == 0 ? w.k_scale : w.v_scale));
      }
    }
    // New rows as the cache will hold them: quantized from their T values and read back
    // dequantized (the device receives these values rounded to T, which quantize to the same
    // codes).
    for (size_t i = 0; i < kv; ++i) {
      for (int which = 0; which < 2; ++which) {
        float& x = which == 0 ? w.key[i] : w.value[i];
        const float s = which == 0 ? w.k_scale : w.v_scale;
        x = static_cast<float>(
            attnrt_test::DequantizeElement(format, attnrt_test::QuantizeElement(format, x, s), s));
      }
    }
  } else if (c.has_past) {
    w.past_key = RandomRounded(rng, past, 0.5f, bf);
    w.past_value = RandomRounded(rng, past, 1.0f, bf);
    auto to_bytes = [bf](const std::vector<float>& v) {
      std::vector<uint8_t> b(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t bits = Encode16(bf, v[i]);
        std::memcpy(&b[2 * i], &bits, 2);
      }
      return b;
    };
    w.past_k_bytes = to_bytes(w.past_key);
    w.past_v_bytes = to_bytes(w.past_value);
  }
  if (c.rotary != 0) {
    const int64_t half = c.H / 2;
    w.cos.resize(static_cast<size_t>(w.M * half));
    w.sin.resize(w.cos.size());
    for (int64_t pos = 0; pos < w.M; ++pos) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(10000.0, -2.0 * i / c.H);
        w.cos[pos * half + i] = Round16(bf, static_cast<float>(std::cos(angle)));
        w.sin[pos * half + i] = Round16(bf, static_cast<float>(std::sin(angle)));
      }
    }
    if (c.position_ids) {
      std::uniform_int_distribution<int64_t> pos(0, w.M - 1);
      w.positions.resize(static_cast<size_t>(c.B * c.S));
      for (auto& p : w.positions) p = pos(rng);
      if (c.S == c.T) w.positions[0] = std::uniform_int_distribution<int64_t>(0, w.M - c.S)(rng);
    }
  }
  const int64_t bias_b = c.bias_broadcast ? 1 : c.B;
  if (c.bias) w.bias = RandomRounded(rng, static_cast<size_t>(bias_b * c.N * c.S * c.T), 0.5f, bf);
  if (c.sink) w.sink = RandomRounded(rng, static_cast<size_t>(c.N), 1.0f, bf);

  // Device copies.
  w.query16 = Encode(bf, w.query);
  w.d_query = w.Make(w.query16.size() * 2);
  w.d_query->Upload(w.query16);
  if (!c.packed) {
    w.key16 = Encode(bf, w.key);
    w.value16 = Encode(bf, w.value);
    w.d_key = w.Make(kv * 2);
    w.d_value = w.Make(kv * 2);
    w.d_key->Upload(w.key16);
    w.d_value->Upload(w.value16);
  }
  if (c.has_past) {
    w.d_past_k = w.Make(past * static_cast<size_t>(w.CacheElem()));
    w.d_past_v = w.Make(past * static_cast<size_t>(w.CacheElem()));
    if (perf) {
      CHECK_CUDA(cudaMemset(w.d_past_k->ptr, 0x3C, w.d_past_k->bytes));
      CHECK_CUDA(cudaMemset(w.d_past_v->ptr, 0x3C, w.d_past_v->bytes));
    } else {
      w.d_past_k->Upload(w.past_k_bytes);
      w.d_past_v->Upload(w.past_v_bytes);
    }
  }
  if (c.rotary != 0) {
    w.cos16 = Encode(bf, w.cos);
    w.sin16 = Encode(bf, w.sin);
    w.d_cos = w.Make(w.cos16.size() * 2);
    w.d_sin = w.Make(w.sin16.size() * 2);
    w.d_cos->Upload(w.cos16);
    w.d_sin->Upload(w.sin16);
    if (c.position_ids) {
      w.d_pos = w.Make(w.positions.size() * 8);
      w.d_pos->Upload(w.positions);
    }
  }
  if (c.bias) {
    w.bias16 = Encode(bf, w.bias);
    w.d_bias = w.Make(w.bias16.size() * 2);
    w.d_bias->Upload(w.bias16);
  }
  if (c.sink) {
    w.sink16 = Encode(bf, w.sink);
    w.d_sink = w.Make(w.sink16.size() * 2);
    w.d_sink->Upload(w.sink16);
  }
  if (c.cache != Cache::kSame) {
    w.d_kscale = w.Make(4);
    w.d_vscale = w.Make(4);
    w.d_kscale->Upload(std::vector<float>{w.k_scale});
    w.d_vscale->Upload(std::vector<float>{w.v_scale});
  }
  w.d_out = w.Make(static_cast<size_t>(c.B * c.S * c.N * c.H * 2));
  if (c.has_present && !c.shared) {
    const size_t bytes = static_cast<size_t>(c.B * c.Nkv * w.PL * c.H * w.CacheElem());
    w.d_pres_k = w.Make(bytes);
    w.d_pres_v = w.Make(bytes);
  }
}

// Poison outputs (and restore a shared cache) before every run.
void Reset(Workload& w) {
  CHECK_CUDA(cudaMemset(w.d_out->ptr, 0xFF, w.d_out->bytes));
  if (w.d_pres_k != nullptr) {
    CHECK_CUDA(cudaMemset(w.d_pres_k->ptr, 0xFF, w.d_pres_k->bytes));
    CHECK_CUDA(cudaMemset(w.d_pres_v->ptr, 0xFF, w.d_pres_v->bytes));
  }
  if (w.c.shared && !w.past_k_bytes.empty()) {
    w.d_past_k->Upload(w.past_k_bytes);
    w.d_past_v->Upload(w.past_v_bytes);
  }
}

// Tensor descriptors for the runtime.
struct Binding {
  std::vector<std::vector<int64_t>> shapes;
  attnrt_tensor in[ATTNRT_GQA_NUM_INPUTS]{};
  attnrt_tensor out[ATTNRT_GQA_NUM_OUTPUTS]{};
  const attnrt_tensor* in_ptrs[ATTNRT_GQA_NUM_INPUTS]{};
  const attnrt_tensor* out_ptrs[ATTNRT_GQA_NUM_OUTPUTS]{};
  int32_t seqlens_host[4096]{};
  int32_t total_host = 0;
};

attnrt_tensor Desc(Binding& b, void* data, attnrt_dtype dtype, std::vector<int64_t> shape,
                   bool host = false) {
  b.shapes.push_back(std::move(shape));
  attnrt_tensor t{};
  t.data = data;
  t.device = {host ? ATTNRT_DEVICE_CPU : ATTNRT_DEVICE_CUDA, 0};
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(b.shapes.back().size());
  t.shape = b.shapes.back().data();
  return t;
}

void Bind(Workload& w, Binding& b) {
  const Case& c = w.c;
  b.shapes.reserve(32);
  const attnrt_dtype t16{
      static_cast<uint8_t>(c.bf16 ? ATTNRT_DTYPE_CODE_BFLOAT : ATTNRT_DTYPE_CODE_FLOAT), 16, 1};
  attnrt_dtype tc = t16;
  if (c.cache == Cache::kInt8) tc = {ATTNRT_DTYPE_CODE_INT, 8, 1};
  if (c.cache == Cache::kFp8) tc = {ATTNRT_DTYPE_CODE_FLOAT8_E4M3FN, 8, 1};
  const attnrt_dtype i32{ATTNRT_DTYPE_CODE_INT, 32, 1}, i64{ATTNRT_DTYPE_CODE_INT, 64, 1},
      f32{ATTNRT_DTYPE_CODE_FLOAT, 32, 1};
  b.in[ATTNRT_GQA_INPUT_QUERY] = Desc(b, w.d_query->ptr, t16, {c.B, c.S, w.qrow});
  if (!c.packed) {
    b.in[ATTNRT_GQA_INPUT_KEY] = Desc(b, w.d_key->ptr, t16, {c.B, w.L, c.Nkv * c.H});
    b.in[ATTNRT_GQA_INPUT_VALUE] = Desc(b, w.d_value->ptr, t16, {c.B, w.L, c.Nkv * c.H});
  }
  if (c.has_past) {
    b.in[ATTNRT_GQA_INPUT_PAST_KEY] = Desc(b, w.d_past_k->ptr, tc, {c.B, c.Nkv, c.P, c.H});
    b.in[ATTNRT_GQA_INPUT_PAST_VALUE] = Desc(b, w.d_past_v->ptr, tc, {c.B, c.Nkv, c.P, c.H});
  }
  for (int64_t i = 0; i < c.B; ++i) b.seqlens_host[i] = c.seqlens[static_cast<size_t>(i)];
  b.total_host = static_cast<int32_t>(c.T);
  b.in[ATTNRT_GQA_INPUT_SEQLENS_K] = Desc(b, b.seqlens_host, i32, {c.B}, true);
  b.in[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = Desc(b, &b.total_host, i32, {1}, true);
  if (c.rotary != 0) {
    b.in[ATTNRT_GQA_INPUT_COS_CACHE] = Desc(b, w.d_cos->ptr, t16, {w.M, c.H / 2});
    b.in[ATTNRT_GQA_INPUT_SIN_CACHE] = Desc(b, w.d_sin->ptr, t16, {w.M, c.H / 2});
    if (c.position_ids)
      b.in[ATTNRT_GQA_INPUT_POSITION_IDS] = Desc(b, w.d_pos->ptr, i64, {c.B, c.S});
  }
  if (c.bias) {
    b.in[ATTNRT_GQA_INPUT_ATTENTION_BIAS] =
        Desc(b, w.d_bias->ptr, t16, {c.bias_broadcast ? 1 : c.B, c.N, c.S, c.T});
  }
  if (c.sink) b.in[ATTNRT_GQA_INPUT_HEAD_SINK] = Desc(b, w.d_sink->ptr, t16, {c.N});
  if (c.cache != Cache::kSame) {
    b.in[ATTNRT_GQA_INPUT_K_SCALE] = Desc(b, w.d_kscale->ptr, f32, {1});
    b.in[ATTNRT_GQA_INPUT_V_SCALE] = Desc(b, w.d_vscale->ptr, f32, {1});
  }
  b.out[ATTNRT_GQA_OUTPUT_OUTPUT] = Desc(b, w.d_out->ptr, t16, {c.B, c.S, c.N * c.H});
  if (c.has_present) {
    void* pk = c.shared ? w.d_past_k->ptr : w.d_pres_k->ptr;
    void* pv = c.shared ? w.d_past_v->ptr : w.d_pres_v->ptr;
    b.out[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = Desc(b, pk, tc, {c.B, c.Nkv, w.PL, c.H});
    b.out[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = Desc(b, pv, tc, {c.B, c.Nkv, w.PL, c.H});
  }
  for (int i = 0; i < ATTNRT_GQA_NUM_INPUTS; ++i) {
    b.in_ptrs[i] = b.in[i].shape != nullptr ? &b.in[i] : nullptr;
  }
  for (int o = 0; o < ATTNRT_GQA_NUM_OUTPUTS; ++o) {
    b.out_ptrs[o] = b.out[o].shape != nullptr ? &b.out[o] : nullptr;
  }
}

attnrt_gqa_attributes Attributes(const Case& c) {
  attnrt_gqa_attributes a;
  attnrt_gqa_attributes_init(&a);
  a.num_heads = static_cast<int32_t>(c.N);
  a.kv_num_heads = static_cast<int32_t>(c.Nkv);
  a.causal = c.causal;
  a.local_window_size = c.window;
  a.softcap = c.softcap;
  a.do_rotary = c.rotary != 0;
  a.rotary_interleaved = c.rotary == 2;
  a.smooth_softmax = c.smooth ? 1 : -1;
  if (c.cache != Cache::kSame) {
    a.k_quant_type = a.v_quant_type = ATTNRT_GQA_QUANT_PER_TENSOR;
    a.kv_cache_bit_width = 8;
  }
  return a;
}

// A planned op on a runtime that pins `kernel`.
struct Planned {
  attnrt_runtime* runtime = nullptr;
  attnrt_op* op = nullptr;
  attnrt_plan* plan = nullptr;
  DeviceBuffer* workspace = nullptr;
  std::string kernel;
  ~Planned() {
    delete workspace;
    if (plan != nullptr) attnrt_plan_release(plan);
    if (op != nullptr) attnrt_op_destroy(op);
    if (runtime != nullptr) attnrt_runtime_destroy(runtime);
  }
};

void PlanFor(Workload& w, Binding& b, const std::string& kernel, Planned& p) {
  attnrt_runtime_options options;
  std::memset(&options, 0, sizeof options);
  attnrt_runtime_options_init(&options);
  options.kernel = kernel.c_str();
  options.disable = "";
  CheckAttnrt(attnrt_runtime_create(&options, &p.runtime), "attnrt_runtime_create");
  const attnrt_gqa_attributes a = Attributes(w.c);
  CheckAttnrt(attnrt_op_create(p.runtime, ATTNRT_OP_GQA, &a, &p.op), "attnrt_op_create");
  CheckAttnrt(attnrt_op_plan(p.op, b.in_ptrs, ATTNRT_GQA_NUM_INPUTS, b.out_ptrs,
                             ATTNRT_GQA_NUM_OUTPUTS, &p.plan),
              "attnrt_op_plan");
  attnrt_plan_info info{};
  info.struct_size = sizeof info;
  CheckAttnrt(attnrt_plan_get_info(p.plan, &info), "attnrt_plan_get_info");
  p.kernel = info.kernel != nullptr ? info.kernel : "";
  if (p.kernel != kernel) {
    throw std::runtime_error("planned kernel " + p.kernel + ", expected " + kernel);
  }
  p.workspace = new DeviceBuffer(std::max<size_t>(info.workspace_size, 256));
}

void RunOnce(Planned& p, Binding& b, cudaStream_t stream) {
  CheckAttnrt(attnrt_plan_run(p.plan, b.in_ptrs, ATTNRT_GQA_NUM_INPUTS, b.out_ptrs,
                              ATTNRT_GQA_NUM_OUTPUTS, p.workspace->ptr, p.workspace->bytes, stream),
              "attnrt_plan_run");
}

attnrt_test::GqaRefOutputs Reference(const Workload& w) {
  const Case& c = w.c;
  attnrt_test::GqaRefProblem r;
  r.batch_size = c.B;
  r.sequence_length = c.S;
  r.kv_sequence_length = w.L;
  r.num_heads = c.N;
  r.kv_num_heads = c.Nkv;
  r.head_size = c.H;
  r.packed_qkv = c.packed;
  r.has_past = c.has_past;
  r.past_length = c.P;
  r.has_present = c.has_present;
  r.present_length = w.PL;
  r.present_shares_past = c.shared;
  r.total_sequence_length = static_cast<int32_t>(c.T);
  r.seqlens_k = c.seqlens;
  r.causal = c.causal;
  r.softcap = c.softcap;
  r.local_window_size = c.window;
  r.smooth_softmax = c.smooth ? 1 : -1;
  r.do_rotary = c.rotary != 0;
  r.rotary_interleaved = c.rotary == 2;
  r.rotary_cache_length = c.rotary != 0 ? w.M : 0;
  r.rotary_half_dim = c.H / 2;
  r.position_ids_length = c.position_ids ? c.S : 0;
  r.bias_batch = c.bias ? (c.bias_broadcast ? 1 : c.B) : 0;
  r.bias_heads = c.bias ? c.N : 0;
  r.has_head_sink = c.sink;
  attnrt_test::GqaRefInputs in;
  in.query = w.query.data();
  in.key = c.packed ? nullptr : w.key.data();
  in.value = c.packed ? nullptr : w.value.data();
  in.past_key = c.has_past ? w.past_key.data() : nullptr;
  in.past_value = c.has_past ? w.past_value.data() : nullptr;
  in.cos_cache = c.rotary != 0 ? w.cos.data() : nullptr;
  in.sin_cache = c.rotary != 0 ? w.sin.data() : nullptr;
  in.position_ids = c.position_ids ? w.positions.data() : nullptr;
  in.attention_bias = c.bias ? w.bias.data() : nullptr;
  in.head_sink = c.sink ? w.sink.data() : nullptr;
  return attnrt_test::ComputeGqaReference(r, in);
}

struct Compare {
  double max_error = 0.0;
  int64_t bad = 0, nan = 0, count = 0;
  std::string first_bad;
};

void CompareValue(Compare& cmp, double got, double want, double atol, double rtol,
                  const std::string& where) {
  ++cmp.count;
  if (!std::isfinite(got)) {
    if (cmp.nan++ == 0 && cmp.first_bad.empty()) cmp.first_bad = where + " is not finite";
    ++cmp.bad;
    return;
  }
  const double err = std::fabs(got - want);
  cmp.max_error = std::max(cmp.max_error, err);
  if (err > atol + rtol * std::fabs(want)) {
    if (cmp.bad++ == 0 && cmp.first_bad.empty()) {
      cmp.first_bad = where + ": got " + std::to_string(got) + ", want " + std::to_string(want);
    }
  }
}

// Checks one kernel on one case; returns true when every element matches.
bool CheckCase(const Case& c, const std::string& kernel, uint64_t seed, cudaStream_t stream) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.c = c;
  Build(w, rng, false);
  const attnrt_test::GqaRefOutputs ref = Reference(w);
  Binding b;
  Bind(w, b);
  Planned p;
  PlanFor(w, b, kernel, p);
  Reset(w);
  RunOnce(p, b, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaGetLastError());

  const double atol = c.bf16 ? 2.5e-2 : 4e-3;
  const double rtol = c.bf16 ? 2e-2 : 4e-3;
  Compare out;
  const auto got = w.d_out->Download<uint16_t>();
  for (size_t i = 0; i < got.size(); ++i) {
    CompareValue(out, Decode16(c.bf16, got[i]), ref.output[i], atol, rtol,
                 "output[" + std::to_string(i) + "]");
  }
  Compare present;
  if (c.has_present) {
    const DeviceBuffer* pk = c.shared ? w.d_past_k : w.d_pres_k;
    const DeviceBuffer* pv = c.shared ? w.d_past_v : w.d_pres_v;
    for (int which = 0; which < 2; ++which) {
      const auto bytes = (which == 0 ? pk : pv)->Download<uint8_t>();
      const auto& want = which == 0 ? ref.present_key : ref.present_value;
      const float scale = which == 0 ? w.k_scale : w.v_scale;
      const char* name = which == 0 ? "present_key" : "present_value";
      for (size_t i = 0; i < want.size(); ++i) {
        double v;
        if (c.cache == Cache::kSame) {
          uint16_t bits;
          std::memcpy(&bits, &bytes[2 * i], 2);
          v = Decode16(c.bf16, bits);
        } else {
          v = attnrt_test::DequantizeElement(CacheFormatOf(c.cache), bytes[i], scale);
        }
        // Rotated keys are rounded to T by the kernel, the reference keeps them exact.
        CompareValue(present, v, want[i], c.cache == Cache::kSame ? atol : 1.01 * scale,
                     c.cache == Cache::kSame ? rtol : 0.0,
                     std::string(name) + "[" + std::to_string(i) + "]");
      }
    }
  }
  const bool ok = out.bad == 0 && present.bad == 0;
  std::printf("  %-4s %-34s %-44s out max|err| %.2e%s", ok ? "ok" : "FAIL", kernel.c_str(),
              c.name.c_str(), out.max_error, c.has_present ? "" : "\n");
  if (c.has_present) std::printf("  present max|err| %.2e\n", present.max_error);
  if (!ok) {
    std::printf("       output: %lld bad of %lld (%lld not finite) %s\n",
                static_cast<long long>(out.bad), static_cast<long long>(out.count),
                static_cast<long long>(out.nan), out.first_bad.c_str());
    std::printf("       present: %lld bad of %lld (%lld not finite) %s\n",
                static_cast<long long>(present.bad), static_cast<long long>(present.count),
                static_cast<long long>(present.nan), present.first_bad.c_str());
  }
  return ok;
}

std::vector<int32_t> DecodeSeqlens(std::mt19937_64& rng, int64_t B, int64_t P) {
  std::vector<int32_t> s(static_cast<size_t>(B));
  std::uniform_int_distribution<int32_t> len(1, static_cast<int32_t>(P - 1));
  for (auto& v : s) v = len(rng);
  s[0] = static_cast<int32_t>(P - 1);  // one batch fills the buffer
  return s;
}

const std::string kXqa = "cuda_xqa.gqa.xqa.sm80";
const std::string kFlashDecode = "cuda_flash.gqa.flash_decode.sm80";
const std::string kFlash = "cuda_flash.gqa.flash.sm80";
const std::string kUnfused = "cuda_flash.gqa.unfused.sm80";

std::vector<Case> CorrectnessCases(std::mt19937_64& rng) {
  std::vector<Case> cases;
  auto decode = [&](std::string name, int64_t B, int64_t N, int64_t Nkv, int64_t H, int64_t P,
                    bool bf16) {
    Case c;
    c.name = std::move(name);
    c.B = B, c.S = 1, c.N = N, c.Nkv = Nkv, c.H = H, c.P = P, c.T = P;
    c.has_past = true, c.shared = true, c.bf16 = bf16;
    c.seqlens = DecodeSeqlens(rng, B, P);
    c.kernels = {kXqa, kFlashDecode, kFlash, kUnfused};
    return c;
  };
  Case c = decode("decode f16 H128 G4 B3 P1000 rope", 3, 32, 8, 128, 1000, false);
  c.rotary = 1;
  cases.push_back(c);
  c = decode("decode bf16 H64 G1 B2 P600 window 100 sink", 2, 8, 8, 64, 600, true);
  c.window = 100;
  c.sink = true;
  cases.push_back(c);
  c = decode("decode bf16 H256 G16 B2 P700 rope-interleaved pos", 2, 16, 1, 256, 700, true);
  c.rotary = 2;
  c.position_ids = true;
  cases.push_back(c);
  cases.push_back(decode("decode f16 H128 G32 B1 P3000 (split-KV)", 1, 64, 2, 128, 3000, false));
  cases.push_back(decode("decode f16 H64 G24 B2 P2048 (two tiles)", 2, 48, 2, 64, 2048, false));
  c = decode("decode bf16 H128 G8 B4 P4096 smooth", 4, 64, 8, 128, 4096, true);
  c.smooth = true;
  c.sink = true;
  cases.push_back(c);
  // Shared KV (kv_sequence_length 0): the past supplies every key; XQA needs a new row.
  c = decode("decode shared KV (L=0) bf16 H128 G4 B2 P900", 2, 16, 4, 128, 900, true);
  c.L = 0;
  c.kernels = {kFlashDecode, kFlash, kUnfused};
  cases.push_back(c);
  // XQA over quantized caches (group sizes 4/8/16/32, per-tensor scales).
  auto quant = [&](std::string name, Cache cache, int64_t N, int64_t Nkv, int64_t H, bool bf16) {
    Case q = decode(std::move(name), 2, N, Nkv, H, 1500, bf16);
    q.cache = cache;
    q.kernels = {kXqa};
    return q;
  };
  cases.push_back(quant("decode int8 f16 H128 G8", Cache::kInt8, 32, 4, 128, false));
  cases.push_back(quant("decode int8 bf16 H256 G16", Cache::kInt8, 32, 2, 256, true));
  c = quant("decode fp8 bf16 H64 G4 window 300", Cache::kFp8, 16, 4, 64, true);
  c.window = 300;
  cases.push_back(c);
  cases.push_back(quant("decode fp8 f16 H128 G32", Cache::kFp8, 64, 2, 128, false));
  // Decode into a separate present (not shared): flash and unfused.
  c = decode("decode f16 H128 separate present P500", 2, 16, 4, 128, 500, false);
  c.shared = false;
  c.T = 501;
  c.seqlens = {500, 321};
  c.kernels = {kFlash, kUnfused};
  c.softcap = 30.0f;
  c.bias = true;
  cases.push_back(c);
  // Prompts.
  auto prompt = [&](std::string name, int64_t B, int64_t S, int64_t N, int64_t Nkv, int64_t H,
                    bool bf16) {
    Case p;
    p.name = std::move(name);
    p.B = B, p.S = S, p.T = S, p.N = N, p.Nkv = Nkv, p.H = H, p.bf16 = bf16;
    p.seqlens.assign(static_cast<size_t>(B), static_cast<int32_t>(S - 1));
    p.kernels = {kFlash, kUnfused};
    return p;
  };
  c = prompt("prefill f16 H128 B2 S200 softcap bias packed", 2, 200, 8, 2, 128, false);
  c.softcap = 30.0f;
  c.bias = true;
  c.packed = true;
  cases.push_back(c);
  c = prompt("prefill bf16 H64 S130 window 50 rope pos", 1, 130, 8, 4, 64, true);
  c.window = 50;
  c.rotary = 1;
  c.position_ids = true;
  cases.push_back(c);
  c = prompt("prefill f16 H256 S100 non-causal sink bias-bcast", 2, 100, 4, 2, 256, false);
  c.causal = 0;
  c.sink = true;
  c.bias = true;
  c.bias_broadcast = true;
  cases.push_back(c);
  c = prompt("prefill bf16 H128 right-padded B2 S96", 2, 96, 8, 8, 128, true);
  c.seqlens = {95, 40};
  cases.push_back(c);
  c = prompt("prefill f16 H128 no present S77", 1, 77, 4, 1, 128, false);
  c.has_present = false;
  cases.push_back(c);
  c = prompt("chunked prefill bf16 H128 S64 P300", 1, 64, 8, 2, 128, true);
  c.has_past = true;
  c.P = 300;
  c.T = 364;
  c.seqlens = {363 - 20};
  c.rotary = 1;
  cases.push_back(c);
  c = prompt("prefill f16 H96 (unfused only) sink bias", 2, 50, 6, 3, 96, false);
  c.kernels = {kUnfused};
  c.sink = true;
  c.bias = true;
  cases.push_back(c);
  return cases;
}

// ---- performance --------------------------------------------------------------------------------
struct PerfRow {
  std::string kernel, name;
  double ms = 0, tflops = 0, gbps = 0;
};

double MedianMs(std::vector<float>& v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy bandwidth (bytes read + written per second), GB/s.
double MeasureCopyBandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer a(bytes), b(bytes);
  CHECK_CUDA(cudaMemset(a.ptr, 1, bytes));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < 12; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * static_cast<double>(bytes) / (MedianMs(times) * 1e-3) / 1e9;
}

// cuBLAS bf16 GEMM (fp32 accumulation) rate, TFLOP/s.
double MeasureGemmRate(cudaStream_t stream) {
  const int n = 8192;
  const size_t bytes = size_t{2} * n * n;
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  // Non-zero operands (0x3C3C is 0.0115 in bfloat16): an all-zero GEMM draws less power.
  CHECK_CUDA(cudaMemset(a.ptr, 0x3C, bytes));
  CHECK_CUDA(cudaMemset(b.ptr, 0x3C, bytes));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate");
  cublasSetStream(handle, stream);
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < 10; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    const cublasStatus_t s = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.ptr,
                                          CUDA_R_16BF, n, b.ptr, CUDA_R_16BF, n, &beta, c.ptr,
                                          CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmEx failed");
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 2) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasDestroy(handle);
  return 2.0 * n * double(n) * n / (MedianMs(times) * 1e-3) / 1e12;
}

// Visible (query, key) pairs of a case (gqa-semantics.md §3.2-§3.3), and cache rows read.
void CountWork(const Case& c, double* pairs, double* rows) {
  *pairs = 0;
  *rows = 0;
  const bool first = c.S == c.T;
  for (int64_t b = 0; b < c.B; ++b) {
    const int64_t Tb = c.seqlens[static_cast<size_t>(b)] + 1;
    const int64_t offset = (first || (!c.has_past)) ? 0 : Tb - c.S;
    const int64_t rows_b = std::min(Tb, offset + c.S);
    *rows += static_cast<double>(rows_b);
    for (int64_t s = 0; s < c.S; ++s) {
      const int64_t ecl = c.causal ? std::min(offset + s + 1, rows_b) : rows_b;
      const int64_t lo = (c.window >= 0 && ecl > c.window) ? ecl - c.window : 0;
      *pairs += static_cast<double>(ecl - lo) * c.N;
    }
  }
}

PerfRow TimeCase(const Case& c, const std::string& kernel, uint64_t seed, cudaStream_t stream,
                 DeviceBuffer& flush) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.c = c;
  Build(w, rng, true);
  Binding b;
  Bind(w, b);
  Planned p;
  PlanFor(w, b, kernel, p);
  Reset(w);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) RunOnce(p, b, stream);
  std::vector<float> times;
  const auto wall = std::chrono::steady_clock::now();
  while (times.size() < 30 &&
         (times.size() < 5 || std::chrono::steady_clock::now() - wall < std::chrono::seconds(4))) {
    CHECK_CUDA(
        cudaMemsetAsync(flush.ptr, static_cast<int>(times.size() & 0xFF), flush.bytes, stream));
    CHECK_CUDA(cudaEventRecord(start, stream));
    RunOnce(p, b, stream);
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  PerfRow row;
  row.kernel = kernel;
  row.name = c.name;
  row.ms = MedianMs(times);
  double pairs = 0, rows = 0;
  CountWork(c, &pairs, &rows);
  const double elem = c.cache == Cache::kSame ? 2.0 : 1.0;
  // K and V rows read once per kv head, Q and output once, new K/V rows written.
  const double bytes = rows * c.Nkv * c.H * elem * 2 + 2.0 * c.B * c.S * c.N * c.H * 2 +
                       2.0 * c.B * c.S * c.Nkv * c.H * (2 + elem);
  row.tflops = 4.0 * c.H * pairs / (row.ms * 1e-3) / 1e12;
  row.gbps = bytes / (row.ms * 1e-3) / 1e9;
  return row;
}

std::vector<std::pair<Case, std::string>> PerfCases(std::mt19937_64& rng) {
  std::vector<std::pair<Case, std::string>> cases;
  auto decode = [&](int64_t B, int64_t P, Cache cache, const std::string& kernel) {
    Case c;
    c.B = B, c.S = 1, c.N = 32, c.Nkv = 8, c.H = 128, c.P = P, c.T = P;
    c.has_past = c.shared = true;
    c.bf16 = true;
    c.cache = cache;
    c.seqlens.assign(static_cast<size_t>(B), static_cast<int32_t>(P - 1));
    c.name = "decode bf16 llama3-8b B" + std::to_string(B) + " P" + std::to_string(P) +
             (cache == Cache::kInt8  ? " int8"
              : cache == Cache::kFp8 ? " fp8"
                                     : "");
    cases.emplace_back(c, kernel);
  };
  decode(1, 32768, Cache::kSame, kXqa);
  decode(8, 32768, Cache::kSame, kXqa);
  decode(8, 32768, Cache::kSame, kFlashDecode);
  decode(8, 32768, Cache::kInt8, kXqa);
  decode(8, 32768, Cache::kFp8, kXqa);
  decode(64, 4096, Cache::kSame, kXqa);
  auto prefill = [&](int64_t S, int64_t H, bool causal, const std::string& kernel) {
    Case c;
    c.B = 1, c.S = S, c.T = S, c.N = 32, c.Nkv = 8, c.H = H;
    c.bf16 = true;
    c.causal = causal;
    c.seqlens = {static_cast<int32_t>(S - 1)};
    c.name = std::string("prefill bf16 ") + (causal ? "causal" : "full") + " H" +
             std::to_string(H) + " S" + std::to_string(S);
    cases.emplace_back(c, kernel);
  };
  prefill(8192, 128, true, kFlash);
  prefill(8192, 128, false, kFlash);
  prefill(4096, 64, true, kFlash);
  prefill(4096, 256, true, kFlash);
  prefill(2048, 128, true, kUnfused);
  (void)rng;
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  uint64_t seed = 0;
  if (const char* env = std::getenv("ATTNRT_CHECK_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  std::printf("attnrt GPU check, seed %llu (ATTNRT_CHECK_SEED=%llu reproduces it)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  try {
    int device = 0;
    CHECK_CUDA(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
    std::printf("device %d: %s, compute capability %d.%d, %d SMs, L2 %d bytes\n", device, prop.name,
                prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize);
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    std::printf("\n== correctness: every CUDA kernel vs the float64 reference ==\n");
    std::mt19937_64 rng(seed);
    int failures = 0, checks = 0;
    for (const Case& c : CorrectnessCases(rng)) {
      for (const std::string& kernel : c.kernels) {
        ++checks;
        try {
          if (!CheckCase(c, kernel, rng(), stream)) ++failures;
        } catch (const std::exception& e) {
          ++failures;
          std::printf("  FAIL %-34s %-44s error: %s\n", kernel.c_str(), c.name.c_str(), e.what());
          (void)cudaGetLastError();
        }
      }
    }
    std::printf("correctness: %d of %d checks passed\n", checks - failures, checks);

    std::printf("\n== performance (CUDA events, L2 flushed before every sample) ==\n");
    const double copy_gbps = MeasureCopyBandwidth(stream);
    const double gemm_tflops = MeasureGemmRate(stream);
    std::printf(
        "measured device copy bandwidth %.0f GB/s (read + write), cuBLAS bf16 GEMM "
        "%.0f TFLOP/s\n",
        copy_gbps, gemm_tflops);
    DeviceBuffer flush(static_cast<size_t>(std::max(prop.l2CacheSize, 1 << 20)) * 2);
    std::vector<PerfRow> rows;
    int perf_failures = 0;
    for (const auto& [c, kernel] : PerfCases(rng)) {
      if (quick && c.S > 4096) continue;
      try {
        rows.push_back(TimeCase(c, kernel, rng(), stream, flush));
        const PerfRow& r = rows.back();
        std::printf("  %-34s %-40s %9.3f ms\n", r.kernel.c_str(), r.name.c_str(), r.ms);
      } catch (const std::exception& e) {
        ++perf_failures;
        std::printf("  FAIL %-34s %-40s error: %s\n", kernel.c_str(), c.name.c_str(), e.what());
        (void)cudaGetLastError();
      }
    }

    std::printf("\n== summary ==\n");
    std::printf("copy bandwidth %.0f GB/s; bf16 GEMM %.0f TFLOP/s; correctness %d/%d\n", copy_gbps,
                gemm_tflops, checks - failures, checks);
    std::printf("%-34s %-40s %9s %9s %7s %9s %7s\n", "kernel", "case", "ms", "TFLOP/s", "%GEMM",
                "GB/s", "%copy");
    for (const PerfRow& r : rows) {
      std::printf("%-34s %-40s %9.3f %9.1f %6.1f%% %9.0f %6.1f%%\n", r.kernel.c_str(),
                  r.name.c_str(), r.ms, r.tflops, 100.0 * r.tflops / gemm_tflops, r.gbps,
                  100.0 * r.gbps / copy_gbps);
    }
    cudaStreamDestroy(stream);
    if (failures > 0 || perf_failures > 0) {
      std::printf("\nFAILED: %d correctness and %d timing failures (seed %llu)\n", failures,
                  perf_failures, static_cast<unsigned long long>(seed));
      return 1;
    }
    std::printf("\nPASSED\n");
    return 0;
  } catch (const std::exception& e) {
    std::printf("FATAL: %s\n", e.what());
    return 2;
  }
}
