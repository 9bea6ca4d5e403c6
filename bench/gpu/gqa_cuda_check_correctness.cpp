// GPU check of the CUDA GroupQueryAttention kernels, part 1: correctness. Each case runs on every
// kernel it lists against the float64 reference of tests/common (output and present caches element
// by element, any unwritten element shows as NaN); the case matrix covers decode (split-KV, shared
// KV, quantized caches), prefill, chunked prefill and the options.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype_reference.h"
#include "common/gqa_reference.h"
#include "gqa_cuda_check.h"

namespace gqa_cuda_check {
namespace {

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
}  // namespace

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

namespace {

std::vector<int32_t> DecodeSeqlens(std::mt19937_64& rng, int64_t B, int64_t P) {
  std::vector<int32_t> s(static_cast<size_t>(B));
  std::uniform_int_distribution<int32_t> len(1, static_cast<int32_t>(P - 1));
  for (auto& v : s) v = len(rng);
  s[0] = static_cast<int32_t>(P - 1);  // one batch fills the buffer
  return s;
}

}  // namespace

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
}  // namespace gqa_cuda_check
