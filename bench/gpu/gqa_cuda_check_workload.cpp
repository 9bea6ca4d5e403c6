// GPU check of the CUDA GroupQueryAttention kernels: the device workload of one case (seeded random
// inputs rounded to T, their encodings and device copies, poisoned outputs), its tensor
// descriptors, and a plan on a runtime pinned to one kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"
#include "common/dtype_reference.h"
#include "gqa_cuda_check.h"

namespace gqa_cuda_check {

void CheckAttnrt(attnrt_status status, const char* what) {
  if (status != ATTNRT_OK) {
    throw std::runtime_error(std::string(what) + ": " + attnrt_status_name(status) + ": " +
                             attnrt_last_error_message());
  }
}

// ---- host encodings ----------------------------------------------------------------------------
namespace {

using attnrt_test::FloatFormat;

uint16_t Encode16(bool bf16, float x) {
  return bf16 ? attnrt_test::BFloat16Bits(x) : attnrt_test::Float16Bits(x);
}
float Round16(bool bf16, float x) {
  return attnrt_test::RoundToFormat(bf16 ? FloatFormat::kBFloat16 : FloatFormat::kFloat16, x);
}

}  // namespace

float Decode16(bool bf16, uint16_t bits) {
  return bf16 ? attnrt_test::BFloat16Value(bits) : attnrt_test::Float16Value(bits);
}
attnrt_test::CacheFormat CacheFormatOf(Cache c) {
  return c == Cache::kInt8 ? attnrt_test::CacheFormat::kInt8
                           : attnrt_test::CacheFormat::kFloat8E4M3Fn;
}

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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
}  // namespace gqa_cuda_check
