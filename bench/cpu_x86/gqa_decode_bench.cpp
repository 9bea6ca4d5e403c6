// GroupQueryAttention through the runtime, one benchmark per cpu_x86 kernel (pinned by name), on
// Llama-3-8B layer shapes (num_heads 32, kv_num_heads 8, head_size 128, float32): one decode step
// over a shared past/present buffer at several past lengths, and a first prompt. Counters: bytes/s
// of KV cache read (decode) and FLOP/s (prompt).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"

namespace {

constexpr int64_t kNumHeads = 32;
constexpr int64_t kKvNumHeads = 8;
constexpr int64_t kHeadSize = 128;
const attnrt_dtype kF32{ATTNRT_DTYPE_CODE_FLOAT, 32, 1};
const attnrt_dtype kI32{ATTNRT_DTYPE_CODE_INT, 32, 1};

struct Tensor {
  std::vector<int64_t> shape;
  attnrt_tensor desc{};

  Tensor(void* data, attnrt_dtype dtype, std::vector<int64_t> dims) : shape(std::move(dims)) {
    desc.data = data;
    desc.device = {ATTNRT_DEVICE_CPU, 0};
    desc.ndim = static_cast<int32_t>(shape.size());
    desc.dtype = dtype;
    desc.shape = shape.data();
  }
};

void Check(attnrt_status status, benchmark::State& state) {
  if (status != ATTNRT_OK) state.SkipWithError(attnrt_last_error_message());
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// One GQA step: batch 1, S new tokens, past rows already in a buffer of `capacity` rows that is
// both past and present (in-place append).
void RunGqa(benchmark::State& state, const char* kernel, int64_t seq_len, int64_t past_len) {
  const int64_t capacity = past_len + seq_len;
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.kernel = kernel;
  attnrt_runtime* runtime = nullptr;
  Check(attnrt_runtime_create(&options, &runtime), state);
  if (runtime == nullptr) return;
  attnrt_gqa_attributes attributes;
  attnrt_gqa_attributes_init(&attributes);
  attributes.num_heads = kNumHeads;
  attributes.kv_num_heads = kKvNumHeads;
  attnrt_op* op = nullptr;
  Check(attnrt_op_create(runtime, ATTNRT_OP_GQA, &attributes, &op), state);

  std::mt19937 rng(1234);
  auto query = Random(static_cast<size_t>(seq_len * kNumHeads * kHeadSize), rng);
  auto key = Random(static_cast<size_t>(seq_len * kKvNumHeads * kHeadSize), rng);
  auto value = Random(key.size(), rng);
  auto cache_k = Random(static_cast<size_t>(kKvNumHeads * capacity * kHeadSize), rng);
  auto cache_v = Random(cache_k.size(), rng);
  std::vector<float> output(query.size());
  int32_t seqlens_k = static_cast<int32_t>(past_len + seq_len - 1);
  int32_t total = static_cast<int32_t>(past_len + seq_len);

  Tensor q(query.data(), kF32, {1, seq_len, kNumHeads * kHeadSize});
  Tensor k(key.data(), kF32, {1, seq_len, kKvNumHeads * kHeadSize});
  Tensor v(value.data(), kF32, {1, seq_len, kKvNumHeads * kHeadSize});
  Tensor pk(cache_k.data(), kF32, {1, kKvNumHeads, capacity, kHeadSize});
  Tensor pv(cache_v.data(), kF32, {1, kKvNumHeads, capacity, kHeadSize});
  Tensor sl(&seqlens_k, kI32, {1});
  Tensor tl(&total, kI32, {1});
  Tensor out(output.data(), kF32, {1, seq_len, kNumHeads * kHeadSize});
  const attnrt_tensor* inputs[] = {&q.desc, &k.desc, &v.desc, &pk.desc, &pv.desc, &sl.desc,
                                   &tl.desc};
  const attnrt_tensor* outputs[] = {&out.desc, &pk.desc, &pv.desc};
  attnrt_plan* plan = nullptr;
  Check(attnrt_op_plan(op, inputs, 7, outputs, 3, &plan), state);
  if (plan != nullptr) {
    attnrt_plan_info info;
    info.struct_size = sizeof(info);
    attnrt_plan_get_info(plan, &info);
    std::vector<unsigned char> workspace(info.workspace_size + info.workspace_alignment);
    void* ws = workspace.data() + (info.workspace_alignment -
                                   reinterpret_cast<uintptr_t>(workspace.data()) %
                                       info.workspace_alignment) %
                                      info.workspace_alignment;
    state.SetLabel(info.kernel);
    for (auto _ : state) {
      if (attnrt_plan_run(plan, inputs, 7, outputs, 3, ws, info.workspace_size, nullptr) !=
          ATTNRT_OK) {
        state.SkipWithError(attnrt_last_error_message());
        break;
      }
      benchmark::DoNotOptimize(output.data());
    }
  }
  const double kv_bytes = 2.0 * kKvNumHeads * double(total) * kHeadSize * sizeof(float);
  const double flops = 4.0 * kNumHeads * double(seq_len) * double(total) * kHeadSize;
  state.counters["kv_bytes/s"] =
      benchmark::Counter(kv_bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  attnrt_plan_release(plan);
  attnrt_op_destroy(op);
  attnrt_runtime_destroy(runtime);
}

void BM_Decode(benchmark::State& state, const char* kernel) {
  RunGqa(state, kernel, 1, state.range(0));
}
void BM_Prompt(benchmark::State& state, const char* kernel) {
  RunGqa(state, kernel, state.range(0), 0);
}

BENCHMARK_CAPTURE(BM_Decode, scalar, "cpu_x86.gqa.naive.scalar")
    ->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, avx2, "cpu_x86.gqa.naive.avx2")
    ->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prompt, scalar, "cpu_x86.gqa.naive.scalar")
    ->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prompt, avx2, "cpu_x86.gqa.naive.avx2")
    ->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
