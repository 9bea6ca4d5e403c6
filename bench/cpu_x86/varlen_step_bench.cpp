// The fixed cost of one layer's call in a serving engine's decode step, through the public C ABI:
// a PagedGroupQueryAttentionVarlen decode of B short sequences (num_heads 32, kv_num_heads 8,
// head_size 128, float32 cache, blocks of 16, contexts of 16 to 64 tokens, new rows written
// through slot_mapping), planned once and run per iteration on one thread. With contexts this
// short the kernel's arithmetic is small, so the time is mostly what every call pays: reading and
// checking the host integer inputs (query_start_loc, seq_lens, block_table, slot_mapping, copied
// once per call), the aliasing checks and the dispatch.
//
//   BM_VarlenDecodeStep/sequences:<B>   B in {1, 8, 32, 128}; counter us_per_sequence
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/paged_gqa.h"
#include "attnrt/ops/paged_gqa_varlen.h"

namespace {

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadSize = 128, kBlockSize = 16, kSlots = 4;
constexpr attnrt_dtype kF32{ATTNRT_DTYPE_CODE_FLOAT, 32, 1};
constexpr attnrt_dtype kI32{ATTNRT_DTYPE_CODE_INT, 32, 1};
constexpr attnrt_dtype kI64{ATTNRT_DTYPE_CODE_INT, 64, 1};

void Check(attnrt_status status, benchmark::State& state) {
  if (status != ATTNRT_OK) state.SkipWithError(attnrt_last_error_message());
}

attnrt_tensor Desc(void* data, attnrt_dtype dtype, const std::vector<int64_t>& shape) {
  attnrt_tensor t{};
  t.data = data;
  t.device = {ATTNRT_DEVICE_CPU, 0};
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  t.shape = shape.data();
  return t;
}

void BM_VarlenDecodeStep(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const int64_t blocks = batch * kSlots;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  std::vector<float> q = random(batch * kHeads * kHeadSize);
  std::vector<float> k = random(batch * kKvHeads * kHeadSize);
  std::vector<float> v = random(batch * kKvHeads * kHeadSize);
  std::vector<float> k_cache = random(blocks * kBlockSize * kKvHeads * kHeadSize);
  std::vector<float> v_cache = random(blocks * kBlockSize * kKvHeads * kHeadSize);
  std::vector<float> out(q.size());
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> starts(static_cast<size_t>(batch + 1)), lens(static_cast<size_t>(batch));
  std::vector<int64_t> slots(static_cast<size_t>(batch));
  std::uniform_int_distribution<int32_t> length(16, kSlots * kBlockSize);
  for (int64_t b = 0; b < batch; ++b) {
    starts[static_cast<size_t>(b + 1)] = static_cast<int32_t>(b + 1);
    const int32_t t = length(rng);
    lens[static_cast<size_t>(b)] = t;
    const int32_t position = t - 1;
    slots[static_cast<size_t>(b)] =
        int64_t{ids[static_cast<size_t>(b * kSlots + position / kBlockSize)]} * kBlockSize +
        position % kBlockSize;
  }
  const std::vector<int64_t> q_shape{batch, kHeads * kHeadSize},
      kv_shape{batch, kKvHeads * kHeadSize}, pool_shape{blocks, kBlockSize, kKvHeads, kHeadSize},
      starts_shape{batch + 1}, lens_shape{batch}, table_shape{batch, kSlots}, slots_shape{batch};
  attnrt_tensor tq = Desc(q.data(), kF32, q_shape), tk = Desc(k.data(), kF32, kv_shape),
                tv = Desc(v.data(), kF32, kv_shape), tkc = Desc(k_cache.data(), kF32, pool_shape),
                tvc = Desc(v_cache.data(), kF32, pool_shape),
                ts = Desc(starts.data(), kI32, starts_shape),
                tl = Desc(lens.data(), kI32, lens_shape), tt = Desc(ids.data(), kI32, table_shape),
                tm = Desc(slots.data(), kI64, slots_shape), to = Desc(out.data(), kF32, q_shape);
  const attnrt_tensor* in[ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS] = {&tq, &tk, &tv, &tkc, &tvc,
                                                                 &ts, &tl, &tt, &tm};
  const attnrt_tensor* outs[1] = {&to};

  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.num_threads = 1;
  attnrt_runtime* runtime = nullptr;
  Check(attnrt_runtime_create(&options, &runtime), state);
  attnrt_paged_gqa_attributes a;
  attnrt_paged_gqa_attributes_init(&a);
  a.gqa.num_heads = static_cast<int32_t>(kHeads);
  a.gqa.kv_num_heads = static_cast<int32_t>(kKvHeads);
  a.block_size = static_cast<int32_t>(kBlockSize);
  attnrt_op* op = nullptr;
  attnrt_plan* plan = nullptr;
  if (runtime != nullptr)
    Check(attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA_VARLEN, &a, &op), state);
  if (op != nullptr) {
    Check(attnrt_op_plan(op, in, ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, outs, 1, &plan), state);
  }
  if (plan != nullptr) {
    for (auto _ : state) {
      const attnrt_status st = attnrt_plan_run(plan, in, ATTNRT_PAGED_GQA_VARLEN_NUM_INPUTS, outs,
                                               1, nullptr, 0, nullptr);
      if (st != ATTNRT_OK) {
        state.SkipWithError(attnrt_last_error_message());
        break;
      }
      benchmark::DoNotOptimize(out.data());
    }
    state.counters["us_per_sequence"] = benchmark::Counter(
        static_cast<double>(batch) * 1e-6,
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  }
  attnrt_plan_release(plan);
  attnrt_op_destroy(op);
  attnrt_runtime_destroy(runtime);
}

BENCHMARK(BM_VarlenDecodeStep)
    ->ArgName("sequences")
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Arg(128)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
