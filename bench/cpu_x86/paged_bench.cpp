// Paged vs contiguous KV cache, through the public C ABI, Llama-3-8B layer shapes (num_heads 32,
// kv_num_heads 8, head_size 128, batch 1), float32 cache:
//
//   BM_Decode/contiguous/past:<P>   GroupQueryAttention, one decode step over a shared
//                                   past/present buffer of P + 1 rows (gqa.flash): absolute time
//                                   and KV read bandwidth
//   BM_PagedOverhead/<L>_bs:<BS>/past:<P>  per iteration one contiguous step and one
//                                   PagedGroupQueryAttention step over the same number of tokens
//                                   (paged_gqa.flash), blocks of BS in {16, 64, 256} in random
//                                   order in the pools, block layout L = bsnh or bnsh; counters
//                                   contiguous_us, paged_us (medians), overhead_pct (median
//                                   of the per-iteration ratios). P in {4096, 16384}
//   BM_PagedOverhead/<L>_bs:16_in_order/past:<P>  the same over blocks of 16 whose pool order is
//                                   the logical order (block table 0, 1, 2, ...): the step reads
//                                   the same rows through the same table, so the difference from
//                                   bs:16 is the cost of the blocks' scatter in memory
//   BM_PagedOverhead/gemma_softcap_<L>_bs:<BS>/past:4096  the same with Gemma-2-9B local-layer
//                                   shapes (num_heads 16, kv_num_heads 8, head_size 256, softcap
//                                   50): gqa.flash declines softcap, so both sides run the naive
//                                   row pipeline (paged_gqa.naive vs gqa.naive)
//
// The paged rows run the same algorithm as the contiguous ones (outputs are bitwise equal, see
// tests/plugins/cpu_x86/paged_gqa_test.cpp and paged_gqa_naive_test.cpp), so the ratio of the two
// times is the cost of reading through the block table. Caches are cold: each benchmark rotates
// over enough copies of its K/V working set to total more than 2x the L3 (at least 2).
//
// Before the benchmarks, a memory table: a block pool sized to the tokens held vs a contiguous
// cache sized to the maximum context, for a batch of sequences of mixed lengths and for parallel
// sampling from one shared prompt (fork with copy-on-write), computed with the real block pool.
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/block_pool.h"
#include "attnrt/ops/paged_gqa.h"

namespace {

// Layer shapes of a decode step (float32 cache, batch 1).
struct Shape {
  int64_t num_heads;
  int64_t kv_num_heads;
  int64_t head_size;
  float softcap;
};
constexpr Shape kLlama3_8B{32, 8, 128, 0.0f};
constexpr Shape kGemma2_9BLocal{16, 8, 256, 50.0f};  // softcap: the naive kernels run

// The memory table's model: Llama-3-8B.
constexpr int64_t kKvNumHeads = kLlama3_8B.kv_num_heads;
constexpr int64_t kHeadSize = kLlama3_8B.head_size;
constexpr int64_t kRowBytes = kHeadSize * 4;  // float32
constexpr int64_t kLayers = 32;
const attnrt_dtype kF32{ATTNRT_DTYPE_CODE_FLOAT, 32, 1};
const attnrt_dtype kI32{ATTNRT_DTYPE_CODE_INT, 32, 1};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// An owned, 64-byte aligned host tensor with random float contents (or given int32 values).
struct Tensor {
  std::unique_ptr<unsigned char, FreeDeleter> data;
  std::vector<int64_t> shape;
  attnrt_tensor desc{};

  // Buffers of 2 MiB or more are 2 MiB aligned and advised to use transparent huge pages, as a
  // serving engine would allocate its caches; contiguous caches and pools are treated alike.
  Tensor(attnrt_dtype dtype, std::vector<int64_t> dims, std::mt19937& rng)
      : shape(std::move(dims)) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    const size_t huge = size_t{2} << 20;
    const size_t bytes = static_cast<size_t>(elements) * 4;
    const size_t align = bytes >= huge ? huge : 64;
    const size_t rounded = std::max<size_t>((bytes + align - 1) / align * align, align);
    data.reset(static_cast<unsigned char*>(std::aligned_alloc(align, rounded)));
    if (align == huge) madvise(data.get(), rounded, MADV_HUGEPAGE);
    // Uniform in [-1, 1) from a 64-bit LCG seeded by rng (fast enough for GiBs of caches).
    uint64_t state = (static_cast<uint64_t>(rng()) << 32) | rng();
    auto* f = reinterpret_cast<float*>(data.get());
    for (int64_t i = 0; i < elements; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      f[i] = static_cast<float>(static_cast<int32_t>(state >> 32)) * (1.0f / 2147483648.0f);
    }
    desc.data = data.get();
    desc.device = {ATTNRT_DEVICE_CPU, 0};
    desc.ndim = static_cast<int32_t>(shape.size());
    desc.dtype = dtype;
    desc.shape = shape.data();
  }
  int32_t* i32() { return reinterpret_cast<int32_t*>(data.get()); }
};

size_t L3Bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<size_t>(l3) : size_t{32} << 20;
}

// One decode step's tensors (contiguous when block_size == 0).
struct Step {
  std::vector<std::unique_ptr<Tensor>> owned;
  std::vector<const attnrt_tensor*> inputs;
  std::vector<const attnrt_tensor*> outputs;
  Tensor* Add(std::unique_ptr<Tensor> t) {
    owned.push_back(std::move(t));
    return owned.back().get();
  }
};

std::unique_ptr<Step> MakeStep(const Shape& m, int64_t past, int64_t block_size, bool bnsh,
                               bool in_order, std::mt19937& rng) {
  auto step = std::make_unique<Step>();
  const int64_t T = past + 1;
  const int64_t heads = m.num_heads, kv_heads = m.kv_num_heads, head_size = m.head_size;
  Tensor* q =
      step->Add(std::make_unique<Tensor>(kF32, std::vector<int64_t>{1, 1, heads * head_size}, rng));
  Tensor* k = step->Add(
      std::make_unique<Tensor>(kF32, std::vector<int64_t>{1, 1, kv_heads * head_size}, rng));
  Tensor* v = step->Add(
      std::make_unique<Tensor>(kF32, std::vector<int64_t>{1, 1, kv_heads * head_size}, rng));
  Tensor* out =
      step->Add(std::make_unique<Tensor>(kF32, std::vector<int64_t>{1, 1, heads * head_size}, rng));
  Tensor* seqlens = step->Add(std::make_unique<Tensor>(kI32, std::vector<int64_t>{1}, rng));
  Tensor* total = step->Add(std::make_unique<Tensor>(kI32, std::vector<int64_t>{1}, rng));
  seqlens->i32()[0] = static_cast<int32_t>(T - 1);
  total->i32()[0] = static_cast<int32_t>(T);
  if (block_size == 0) {
    Tensor* cache_k = step->Add(
        std::make_unique<Tensor>(kF32, std::vector<int64_t>{1, kv_heads, T, head_size}, rng));
    Tensor* cache_v = step->Add(
        std::make_unique<Tensor>(kF32, std::vector<int64_t>{1, kv_heads, T, head_size}, rng));
    step->inputs.assign(ATTNRT_GQA_NUM_INPUTS, nullptr);
    step->inputs[ATTNRT_GQA_INPUT_QUERY] = &q->desc;
    step->inputs[ATTNRT_GQA_INPUT_KEY] = &k->desc;
    step->inputs[ATTNRT_GQA_INPUT_VALUE] = &v->desc;
    step->inputs[ATTNRT_GQA_INPUT_PAST_KEY] = &cache_k->desc;
    step->inputs[ATTNRT_GQA_INPUT_PAST_VALUE] = &cache_v->desc;
    step->inputs[ATTNRT_GQA_INPUT_SEQLENS_K] = &seqlens->desc;
    step->inputs[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &total->desc;
    step->outputs = {&out->desc, &cache_k->desc, &cache_v->desc};
    return step;
  }
  const int64_t blocks = (T + block_size - 1) / block_size;
  const std::vector<int64_t> pool_shape =
      bnsh ? std::vector<int64_t>{blocks, kv_heads, block_size, head_size}
           : std::vector<int64_t>{blocks, block_size, kv_heads, head_size};
  Tensor* pool_k = step->Add(std::make_unique<Tensor>(kF32, pool_shape, rng));
  Tensor* pool_v = step->Add(std::make_unique<Tensor>(kF32, pool_shape, rng));
  Tensor* table = step->Add(std::make_unique<Tensor>(kI32, std::vector<int64_t>{1, blocks}, rng));
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  // Blocks scattered, as a busy pool leaves them; in_order: logical block i is pool block i (the
  // pool reads like one contiguous BSNH/BNSH-per-block buffer).
  if (!in_order) std::shuffle(ids.begin(), ids.end(), rng);
  std::copy(ids.begin(), ids.end(), table->i32());
  step->inputs.assign(ATTNRT_PAGED_GQA_NUM_INPUTS, nullptr);
  step->inputs[ATTNRT_PAGED_GQA_INPUT_QUERY] = &q->desc;
  step->inputs[ATTNRT_PAGED_GQA_INPUT_KEY] = &k->desc;
  step->inputs[ATTNRT_PAGED_GQA_INPUT_VALUE] = &v->desc;
  step->inputs[ATTNRT_PAGED_GQA_INPUT_KEY_CACHE] = &pool_k->desc;
  step->inputs[ATTNRT_PAGED_GQA_INPUT_VALUE_CACHE] = &pool_v->desc;
  step->inputs[ATTNRT_PAGED_GQA_INPUT_SEQLENS_K] = &seqlens->desc;
  step->inputs[ATTNRT_PAGED_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &total->desc;
  step->inputs[ATTNRT_PAGED_GQA_INPUT_BLOCK_TABLE] = &table->desc;
  step->outputs = {&out->desc};
  return step;
}

// One planned op over a rotation of cold copies of its working set (contiguous when
// block_size == 0).
struct Runner {
  std::vector<std::unique_ptr<Step>> steps;
  attnrt_runtime* runtime = nullptr;
  attnrt_op* op = nullptr;
  attnrt_plan* plan = nullptr;
  std::string kernel;
  std::string error;
  size_t next = 0;

  Runner(const Shape& m, int64_t block_size, bool bnsh, int64_t past, size_t copies,
         bool in_order) {
    std::mt19937 rng(static_cast<unsigned>(past * 1009 + block_size * 7 + (bnsh ? 1 : 0)));
    for (size_t c = 0; c < copies; ++c) {
      steps.push_back(MakeStep(m, past, block_size, bnsh, in_order, rng));
    }
    attnrt_status status = attnrt_runtime_create(nullptr, &runtime);
    if (status == ATTNRT_OK && block_size == 0) {
      attnrt_gqa_attributes a;
      attnrt_gqa_attributes_init(&a);
      a.num_heads = static_cast<int32_t>(m.num_heads);
      a.kv_num_heads = static_cast<int32_t>(m.kv_num_heads);
      a.softcap = m.softcap;
      status = attnrt_op_create(runtime, ATTNRT_OP_GQA, &a, &op);
    } else if (status == ATTNRT_OK) {
      attnrt_paged_gqa_attributes a;
      attnrt_paged_gqa_attributes_init(&a);
      a.gqa.num_heads = static_cast<int32_t>(m.num_heads);
      a.gqa.kv_num_heads = static_cast<int32_t>(m.kv_num_heads);
      a.gqa.softcap = m.softcap;
      a.block_size = static_cast<int32_t>(block_size);
      a.kv_layout = bnsh ? ATTNRT_PAGED_KV_LAYOUT_BNSH : ATTNRT_PAGED_KV_LAYOUT_BSNH;
      status = attnrt_op_create(runtime, ATTNRT_OP_PAGED_GQA, &a, &op);
    }
    if (status == ATTNRT_OK) {
      status = attnrt_op_plan(op, steps[0]->inputs.data(), steps[0]->inputs.size(),
                              steps[0]->outputs.data(), steps[0]->outputs.size(), &plan);
    }
    if (status != ATTNRT_OK) {
      error = attnrt_last_error_message();
      return;
    }
    attnrt_plan_info info{};
    info.struct_size = sizeof info;
    attnrt_plan_get_info(plan, &info);
    kernel = info.kernel;
  }
  ~Runner() {
    attnrt_plan_release(plan);
    attnrt_op_destroy(op);
    attnrt_runtime_destroy(runtime);
  }
  // Runs the next copy; false (and error set) on failure.
  bool Run() {
    Step& s = *steps[next];
    next = (next + 1) % steps.size();
    if (attnrt_plan_run(plan, s.inputs.data(), s.inputs.size(), s.outputs.data(), s.outputs.size(),
                        nullptr, 0, nullptr) == ATTNRT_OK) {
      return true;
    }
    error = attnrt_last_error_message();
    return false;
  }
};

size_t KvBytes(int64_t past, const Shape& m = kLlama3_8B) {
  return static_cast<size_t>(2 * m.kv_num_heads * (past + 1) * m.head_size * 4);
}
size_t Copies(int64_t past, const Shape& m = kLlama3_8B) {
  return std::max<size_t>(2, 2 * L3Bytes() / KvBytes(past, m) + 1);
}

void BM_Decode(benchmark::State& state, int64_t past) {
  Runner runner(kLlama3_8B, 0, false, past, Copies(past), false);
  if (!runner.error.empty()) {
    state.SkipWithError(runner.error.c_str());
    return;
  }
  state.SetLabel(runner.kernel + " " + std::to_string(runner.steps.size()) + "x" +
                 std::to_string(KvBytes(past) >> 20) + "MiB");
  for (auto _ : state) {
    if (!runner.Run()) {
      state.SkipWithError(runner.error.c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(KvBytes(past)));
}

double Median(std::vector<double> x) {
  if (x.empty()) return 0;
  std::nth_element(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(x.size() / 2), x.end());
  return x[x.size() / 2];
}

// Each iteration runs one contiguous step and one paged step over the same number of tokens (the
// order alternating), timed separately: both see the same machine load, so their ratio holds on a
// shared machine where absolute times drift. Reported: contiguous_us and paged_us (medians) and
// overhead_pct from the median of the per-iteration ratios, which a step slowed by another process
// moves little.
void BM_PagedOverhead(benchmark::State& state, const Shape& m, int64_t block_size, bool bnsh,
                      int64_t past, bool in_order) {
  const size_t copies = (Copies(past, m) + 1) / 2;  // two working sets are live
  Runner contiguous(m, 0, false, past, std::max<size_t>(2, copies), false);
  Runner paged(m, block_size, bnsh, past, std::max<size_t>(2, copies), in_order);
  if (!contiguous.error.empty() || !paged.error.empty()) {
    state.SkipWithError((contiguous.error + paged.error).c_str());
    return;
  }
  state.SetLabel(paged.kernel + " vs " + contiguous.kernel);
  std::vector<double> contiguous_s, paged_s, ratios;
  const auto timed = [](Runner& runner, double* seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = runner.Run();
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return ok;
  };
  for (auto _ : state) {
    double c = 0, p = 0;
    const bool paged_first = ratios.size() % 2 == 1;
    const bool ok = paged_first ? timed(paged, &p) && timed(contiguous, &c)
                                : timed(contiguous, &c) && timed(paged, &p);
    if (!ok) {
      state.SkipWithError((contiguous.error + paged.error).c_str());
      break;
    }
    contiguous_s.push_back(c);
    paged_s.push_back(p);
    ratios.push_back(c > 0 ? p / c : 1.0);
  }
  state.counters["contiguous_us"] = 1e6 * Median(contiguous_s);
  state.counters["paged_us"] = 1e6 * Median(paged_s);
  state.counters["overhead_pct"] = 100.0 * (Median(ratios) - 1);
  // Fastest step of each: what a step costs when no other process took memory bandwidth from it
  // (on a shared machine the medians move with the neighbours' load; the minima move least).
  if (!contiguous_s.empty()) {
    const double c = *std::min_element(contiguous_s.begin(), contiguous_s.end());
    const double p = *std::min_element(paged_s.begin(), paged_s.end());
    state.counters["contiguous_min_us"] = 1e6 * c;
    state.counters["paged_min_us"] = 1e6 * p;
    state.counters["overhead_min_pct"] = 100.0 * (p / c - 1);
  }
}

// ---- memory table -------------------------------------------------------------------------------

double MiB(double bytes) { return bytes / (1024.0 * 1024.0); }

// K and V bytes of one token over all layers (float32 cache).
constexpr double kTokenBytes = 2.0 * kKvNumHeads * kRowBytes * kLayers;

// Blocks a pool needs for `lengths` (one sequence each), and its fragmentation, from the pool.
attnrt_block_pool_stats PoolFor(const std::vector<int64_t>& lengths, int32_t block_size,
                                int64_t shared_prefix) {
  attnrt_block_pool_options options{sizeof(attnrt_block_pool_options), 1 << 20, block_size};
  attnrt_block_pool* pool = nullptr;
  attnrt_block_pool_stats stats{};
  stats.struct_size = sizeof stats;
  if (attnrt_block_pool_create(&options, &pool) != ATTNRT_OK) return stats;
  int64_t parent = -1;
  if (shared_prefix > 0) {
    attnrt_block_pool_add_sequence(pool, &parent);
    attnrt_block_pool_append(pool, parent, shared_prefix, nullptr);
  }
  for (int64_t length : lengths) {
    int64_t seq = -1;
    attnrt_block_copy copy{sizeof copy, 0, 0, 0};
    if (shared_prefix > 0) {
      attnrt_block_pool_fork(pool, parent, &seq);
      attnrt_block_pool_append(pool, seq, length - shared_prefix, &copy);
    } else {
      attnrt_block_pool_add_sequence(pool, &seq);
      attnrt_block_pool_append(pool, seq, length, &copy);
    }
  }
  if (parent >= 0) attnrt_block_pool_remove(pool, parent);
  attnrt_block_pool_get_stats(pool, &stats);
  attnrt_block_pool_destroy(pool);
  return stats;
}

void PrintMemoryTable(const char* title, const std::vector<int64_t>& lengths, int64_t max_context,
                      int64_t shared_prefix) {
  const double contiguous = static_cast<double>(lengths.size()) * max_context * kTokenBytes;
  const int64_t held = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  std::printf(
      "\n%s: %zu sequences, %lld tokens held, max context %lld (Llama-3-8B, 32 layers, "
      "float32 K+V %.0f KiB/token)\n",
      title, lengths.size(), static_cast<long long>(held), static_cast<long long>(max_context),
      kTokenBytes / 1024.0);
  std::printf("%-28s %14s %12s %10s %14s\n", "configuration", "blocks", "KV MiB", "saving",
              "fragmentation");
  std::printf("%-28s %14s %12.0f %10s %14s\n", "contiguous (max context)", "-", MiB(contiguous),
              "-", "-");
  for (int32_t bs : {16, 64, 256}) {
    const attnrt_block_pool_stats s = PoolFor(lengths, bs, shared_prefix);
    const double bytes = static_cast<double>(s.blocks_used) * bs * kTokenBytes;
    char name[64];
    std::snprintf(name, sizeof name, "pool block_size %d", bs);
    std::printf("%-28s %14lld %12.0f %9.1f%% %13.1f%%\n", name,
                static_cast<long long>(s.blocks_used), MiB(bytes),
                100.0 * (1.0 - bytes / contiguous), 100.0 * s.internal_fragmentation);
  }
}

}  // namespace

int main(int argc, char** argv) {
  PrintMemoryTable("Mixed batch", {312, 1200, 4096, 700, 90, 2048, 5000, 150}, 8192, 0);
  PrintMemoryTable("Parallel sampling (8 samples of 256 tokens after one 2000-token prompt)",
                   std::vector<int64_t>(8, 2256), 8192, 2000);
  std::printf("\n");
  for (int64_t past : {4096, 16384}) {
    benchmark::RegisterBenchmark(("BM_Decode/contiguous/past:" + std::to_string(past)).c_str(),
                                 BM_Decode, past)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    for (bool bnsh : {false, true}) {
      for (int64_t bs : {16, 64, 256}) {
        const std::string name = std::string("BM_PagedOverhead/") + (bnsh ? "bnsh" : "bsnh") +
                                 "_bs:" + std::to_string(bs) + "/past:" + std::to_string(past);
        benchmark::RegisterBenchmark(name.c_str(), BM_PagedOverhead, kLlama3_8B, bs, bnsh, past,
                                     false)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
      // The same blocks of 16 in pool order: what of the overhead is the scatter in memory.
      const std::string name = std::string("BM_PagedOverhead/") + (bnsh ? "bnsh" : "bsnh") +
                               "_bs:16_in_order/past:" + std::to_string(past);
      benchmark::RegisterBenchmark(name.c_str(), BM_PagedOverhead, kLlama3_8B, int64_t{16}, bnsh,
                                   past, true)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  for (bool bnsh : {false, true}) {
    for (int64_t bs : {16, 256}) {
      const std::string name = std::string("BM_PagedOverhead/gemma_softcap_") +
                               (bnsh ? "bnsh" : "bsnh") + "_bs:" + std::to_string(bs) +
                               "/past:4096";
      benchmark::RegisterBenchmark(name.c_str(), BM_PagedOverhead, kGemma2_9BLocal, bs, bnsh,
                                   int64_t{4096}, false)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
