// bench_sparse_mla: MixedQuantSparseFlashMla (CSA, quant_mode 1, TND q / PA_BBND KV, 64 heads,
// top-k 2048, cmp_ratio 4, window 128) through the public C ABI, one row per kernel.
//   decode:  B sequences x 1 query token at context S2 = 8192.  Reports query tokens/s and the
//            KV bytes the kernel reads (window + selected compressed tokens, 608 bytes each, once
//            per row and head group) per second.
//   prefill: the last 128 query rows of a 4096-token prefill (S1 = 128, S2 = 4096).
// The metadata op runs once per shape, outside the timed loop (as a decode loop would reuse it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/sparse_mla.h"

namespace {

constexpr int64_t kHeads = 64, kTopk = 2048, kRatio = 4, kWindow = 128, kBlock = 64;
constexpr int64_t kTokenBytes = ATTNRT_SPARSE_MLA_MODE1_TOKEN_BYTES;
constexpr attnrt_dtype kBf16{ATTNRT_DTYPE_CODE_BFLOAT, 16, 1};
constexpr attnrt_dtype kU8{ATTNRT_DTYPE_CODE_UINT, 8, 1};
constexpr attnrt_dtype kI32{ATTNRT_DTYPE_CODE_INT, 32, 1};
constexpr attnrt_dtype kF32{ATTNRT_DTYPE_CODE_FLOAT, 32, 1};

struct Buffer {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  attnrt_tensor t{};
  void Make(attnrt_dtype dtype, std::vector<int64_t> s) {
    shape = std::move(s);
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    bytes.assign(static_cast<size_t>(n * dtype.bits / 8), 0);
    t = attnrt_tensor{bytes.data(),
                      {ATTNRT_DEVICE_CPU, 0},
                      static_cast<int32_t>(shape.size()),
                      dtype,
                      shape.data(),
                      nullptr,
                      0};
  }
  int32_t* i32() { return reinterpret_cast<int32_t*>(bytes.data()); }
};

struct Problem {
  Buffer in[ATTNRT_SPARSE_MLA_NUM_INPUTS];
  Buffer out, lse, metadata;
  const attnrt_tensor* inputs[ATTNRT_SPARSE_MLA_NUM_INPUTS] = {};
  const attnrt_tensor* outputs[ATTNRT_SPARSE_MLA_NUM_OUTPUTS] = {};
  int64_t kv_bytes_per_run = 0;
  int64_t query_tokens = 0;
};

// B sequences of s1 query rows at context s2 each; every cmp index row holds kTopk distinct
// visible compressed tokens (as an indexer would produce).
std::unique_ptr<Problem> Build(int64_t batch, int64_t s1, int64_t s2) {
  auto p = std::make_unique<Problem>();
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = batch * s1;
  p->in[ATTNRT_SPARSE_MLA_INPUT_Q].Make(kBf16, {rows, kHeads, 512});
  auto* q = reinterpret_cast<uint16_t*>(p->in[ATTNRT_SPARSE_MLA_INPUT_Q].bytes.data());
  for (int64_t k = 0; k < rows * kHeads * 512; ++k) {
    const float v = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    q[k] = static_cast<uint16_t>(bits >> 16);
  }
  const int64_t cmp_len = s2 / kRatio;
  auto build_side = [&](int64_t len, int kv, int table) {
    const int64_t per_seq = (len + kBlock - 1) / kBlock;
    p->in[kv].Make(kU8, {batch * per_seq, kBlock, 1, kTokenBytes});
    p->in[table].Make(kI32, {batch, per_seq});
    std::vector<int32_t> ids(batch * per_seq);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::copy(ids.begin(), ids.end(), p->in[table].i32());
    std::vector<float> row(512);
    for (int64_t tok = 0; tok < batch * per_seq * kBlock; ++tok) {
      for (float& v : row) v = normal(rng);
      attnrt_sparse_mla_encode_mode1(row.data(), kF32, 1,
                                     p->in[kv].bytes.data() + tok * kTokenBytes);
    }
  };
  build_side(s2, ATTNRT_SPARSE_MLA_INPUT_ORI_KV, ATTNRT_SPARSE_MLA_INPUT_ORI_BLOCK_TABLE);
  build_side(cmp_len, ATTNRT_SPARSE_MLA_INPUT_CMP_KV, ATTNRT_SPARSE_MLA_INPUT_CMP_BLOCK_TABLE);
  p->in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q].Make(kI32, {batch + 1});
  p->in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV].Make(kI32, {batch});
  p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].Make(kI32, {batch});
  for (int64_t b = 0; b <= batch; ++b)
    p->in[ATTNRT_SPARSE_MLA_INPUT_CU_SEQLENS_Q].i32()[b] = b * s1;
  for (int64_t b = 0; b < batch; ++b) {
    p->in[ATTNRT_SPARSE_MLA_INPUT_SEQUSED_ORI_KV].i32()[b] = static_cast<int32_t>(s2);
    p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_RESIDUAL_KV].i32()[b] = static_cast<int32_t>(s2 % kRatio);
  }
  p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES].Make(kI32, {rows, 1, kTopk});
  int32_t* idx = p->in[ATTNRT_SPARSE_MLA_INPUT_CMP_SPARSE_INDICES].i32();
  std::vector<int32_t> all(cmp_len);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % s1;
    const int64_t visible = std::min(cmp_len, (s2 - s1 + i + 1) / kRatio);
    std::iota(all.begin(), all.begin() + visible, 0);
    std::shuffle(all.begin(), all.begin() + visible, rng);
    const int64_t k_used = std::min(kTopk, visible);
    for (int64_t k = 0; k < kTopk; ++k) idx[r * kTopk + k] = k < k_used ? all[k] : -1;
    p->kv_bytes_per_run += (std::min<int64_t>(kWindow, s2 - s1 + i + 1) + k_used) * kTokenBytes;
  }
  p->in[ATTNRT_SPARSE_MLA_INPUT_SINKS].Make(kF32, {kHeads});
  p->metadata.Make(kI32, {ATTNRT_SPARSE_MLA_METADATA_SIZE});
  p->out.Make(kBf16, {rows, kHeads, 512});
  p->lse.Make(kF32, {1, rows, kHeads});
  for (int i = 0; i < ATTNRT_SPARSE_MLA_NUM_INPUTS; ++i) {
    p->inputs[i] = p->in[i].bytes.empty() ? nullptr : &p->in[i].t;
  }
  p->outputs[0] = &p->out.t;
  p->outputs[1] = &p->lse.t;
  p->query_tokens = rows;
  return p;
}

attnrt_sparse_mla_attributes Attributes() {
  attnrt_sparse_mla_attributes a;
  attnrt_sparse_mla_attributes_init(&a);
  a.quant_mode = 1;
  a.cmp_ratio = kRatio;
  a.ori_mask_mode = 4;
  a.cmp_mask_mode = 3;
  a.ori_win_left = kWindow - 1;
  a.ori_win_right = 0;
  a.layout_q = ATTNRT_SPARSE_MLA_LAYOUT_TND;
  a.layout_kv = ATTNRT_SPARSE_MLA_LAYOUT_PA_BBND;
  a.return_softmax_lse = 1;
  return a;
}

void Run(benchmark::State& state, const char* kernel, int64_t batch, int64_t s1, int64_t s2) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.kernel = kernel;
  attnrt_runtime* runtime = nullptr;
  if (attnrt_runtime_create(&options, &runtime) != ATTNRT_OK) {
    state.SkipWithError(attnrt_last_error_message());
    return;
  }
  std::unique_ptr<Problem> p = Build(batch, s1, s2);
  const attnrt_sparse_mla_attributes a = Attributes();
  attnrt_op *md_op = nullptr, *op = nullptr;
  attnrt_plan *md_plan = nullptr, *plan = nullptr;
  const attnrt_tensor* md_out[1] = {&p->metadata.t};
  bool ok = attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA_METADATA, &a, &md_op) == ATTNRT_OK &&
            attnrt_op_plan(md_op, p->inputs, ATTNRT_SPARSE_MLA_NUM_INPUTS, md_out, 1, &md_plan) ==
                ATTNRT_OK &&
            attnrt_plan_run(md_plan, p->inputs, ATTNRT_SPARSE_MLA_NUM_INPUTS, md_out, 1, nullptr, 0,
                            nullptr) == ATTNRT_OK;
  p->inputs[ATTNRT_SPARSE_MLA_INPUT_METADATA] = &p->metadata.t;
  ok = ok && attnrt_op_create(runtime, ATTNRT_OP_SPARSE_MLA, &a, &op) == ATTNRT_OK &&
       attnrt_op_plan(op, p->inputs, ATTNRT_SPARSE_MLA_NUM_INPUTS, p->outputs, 2, &plan) ==
           ATTNRT_OK;
  if (!ok) {
    state.SkipWithError(attnrt_last_error_message());
  } else {
    for (auto _ : state) {
      if (attnrt_plan_run(plan, p->inputs, ATTNRT_SPARSE_MLA_NUM_INPUTS, p->outputs, 2, nullptr, 0,
                          nullptr) != ATTNRT_OK) {
        state.SkipWithError(attnrt_last_error_message());
        break;
      }
    }
    state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(p->query_tokens),
                                                    benchmark::Counter::kIsIterationInvariantRate);
    state.counters["KV_GB/s"] = benchmark::Counter(static_cast<double>(p->kv_bytes_per_run) * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
  }
  attnrt_plan_release(plan);
  attnrt_plan_release(md_plan);
  attnrt_op_destroy(op);
  attnrt_op_destroy(md_op);
  attnrt_runtime_destroy(runtime);
}

void RegisterAll() {
  for (const char* kernel :
       {"sparse_mla.sparse_mla.flash.avx2", "sparse_mla.sparse_mla.flash.scalar"}) {
    const std::string isa = std::string(kernel).substr(std::string(kernel).rfind('.') + 1);
    for (int64_t batch : {1, 4}) {
      benchmark::RegisterBenchmark(
          ("decode_csa_top2048_h64/" + isa + "/B" + std::to_string(batch)).c_str(),
          [=](benchmark::State& s) { Run(s, kernel, batch, 1, 8192); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    benchmark::RegisterBenchmark(("prefill_csa_top2048_h64_s4096_last128/" + isa).c_str(),
                                 [=](benchmark::State& s) { Run(s, kernel, 1, 128, 4096); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
