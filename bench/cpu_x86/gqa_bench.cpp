// GroupQueryAttention through the public C ABI, one benchmark per registered CPU kernel (each
// pinned by name through attnrt_runtime_options.kernel; the list comes from
// attnrt_runtime_plugin_kernel at startup, so new kernels are picked up without editing this file).
// Llama-3-8B layer shapes: num_heads 32, kv_num_heads 8, head_size 128, batch 1.
//
//   BM_GqaPrefill/<kernel>/S:<S>            first prompt, S = T in {512, 1024, 2048, 4096}, float32
//   BM_GqaPrefill/bf16/<kernel>/S:<S>       the same with the whole op in bfloat16 (query, key,
//                                           value, cache and output)
//   BM_GqaDecode/<cache>/<kernel>/past:<P>  one decode step over a shared past/present buffer,
//                                           P in {1k, 4k, 16k, 64k}; cache float32, float16 or
//                                           bfloat16 (query, key, value and output of that type
//                                           too: the op's 16-bit forms), int8 or int4
//                                           (PER_CHANNEL scales)
//   BM_GqaDecodeSplitKv/threads:16/...      the same with options.num_threads = 16 > B*Nkv = 8, so
//                                           that flash decoding splits the KV sequence
//                                           (oversubscribed on machines with fewer cores: read it
//                                           as a label)
//
// QK and SV GEMM are not benchmarked on their own: the public ABI exposes whole ops only, and the
// kernels' internal GEMMs are not reachable through it.
//
// Caches are cold: every benchmark allocates enough copies of its working set (KV cache, or every
// input and output of a prompt) to total more than 2x the L3 (at least 2 copies) and runs each
// iteration on the next copy in turn, so no iteration finds its data left in the cache by the
// previous ones. The label shows the rotation: copies x bytes per copy.
//
// Counters: bytes_per_second (decode: the KV cache bytes read, T rows of K and V; prefill: inputs
// read and outputs written), FLOP/s (4*N*H per visible query-key pair: QK and PV, 2 FLOP per
// multiply-add; causal prefill counts S(S+1)/2 pairs), and a roofline counter against this
// machine's limits, measured at startup and printed in the context: %read_bw (decode: KV bytes/s
// over the measured streaming read bandwidth) and %fma_peak (FLOP/s over the measured FMA peak of
// the kernel's ISA: AVX-512 for *.avx512 kernels, AVX2 otherwise; for prefill, and for decode,
// where int8/int4 caches are compute-bound).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/gqa.h"
#include "machine_limits.h"

namespace {

constexpr int64_t kNumHeads = 32;
constexpr int64_t kKvNumHeads = 8;
constexpr int64_t kHeadSize = 128;
constexpr int kSplitKvThreads = 16;
// Timed passes of the startup measurements; the best one counts (other load only slows a pass).
constexpr int kLimitPasses = 20;
const attnrt_dtype kF32{ATTNRT_DTYPE_CODE_FLOAT, 32, 1};
const attnrt_dtype kF16{ATTNRT_DTYPE_CODE_FLOAT, 16, 1};
const attnrt_dtype kBF16{ATTNRT_DTYPE_CODE_BFLOAT, 16, 1};
const attnrt_dtype kI32{ATTNRT_DTYPE_CODE_INT, 32, 1};
const attnrt_dtype kI8{ATTNRT_DTYPE_CODE_INT, 8, 1};
const attnrt_dtype kU8{ATTNRT_DTYPE_CODE_UINT, 8, 1};

// Filled in main() before any benchmark runs.
struct Limits {
  size_t l3_bytes = 0;
  double read_bytes_per_second = 0;
  double fma_flops_per_second = 0;         // AVX2
  double fma_avx512_flops_per_second = 0;  // 0 when the CPU/OS lacks AVX-512F
} g_limits;

// The FMA peak a kernel is measured against: that of its ISA suffix (.amx kernels against the
// AVX-512 float32 FMA peak too, so they may exceed 100%).
double FmaPeakOf(const std::string& kernel) {
  const size_t dot = kernel.rfind('.');
  const std::string isa = dot == std::string::npos ? std::string() : kernel.substr(dot);
  const bool avx512 = isa == ".avx512" || isa == ".amx";
  return avx512 && g_limits.fma_avx512_flops_per_second > 0 ? g_limits.fma_avx512_flops_per_second
                                                            : g_limits.fma_flops_per_second;
}

// kQ8_0/kQ4_0: ggml's blocks (PER_BLOCK_32), what llama.cpp's -ctk q8_0 / q4_0 caches hold.
enum class Cache { kFloat32, kFloat16, kBFloat16, kInt8, kInt4, kQ8_0, kQ4_0 };

const char* CacheName(Cache cache) {
  switch (cache) {
    case Cache::kFloat32:
      return "f32";
    case Cache::kFloat16:
      return "f16";
    case Cache::kBFloat16:
      return "bf16";
    case Cache::kInt8:
      return "int8";
    case Cache::kInt4:
      return "int4";
    case Cache::kQ8_0:
      return "q8_0";
    case Cache::kQ4_0:
      return "q4_0";
  }
  return "?";
}

// Bytes of one cache row of one KV head.
int64_t RowBytes(Cache cache) {
  switch (cache) {
    case Cache::kFloat32:
      return kHeadSize * 4;
    case Cache::kFloat16:
    case Cache::kBFloat16:
      return kHeadSize * 2;
    case Cache::kInt8:
      return kHeadSize;
    case Cache::kInt4:
      return kHeadSize / 2;
    case Cache::kQ8_0:
      return kHeadSize / ATTNRT_GQA_QUANT_BLOCK_ELEMENTS * ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES;
    case Cache::kQ4_0:
      return kHeadSize / ATTNRT_GQA_QUANT_BLOCK_ELEMENTS * ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES;
  }
  return 0;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

enum class Fill { kFloat32, kFloat16, kBFloat16, kBytes, kQ8_0Blocks, kQ4_0Blocks };

// 64-byte aligned, filled with pseudo-random data: float32, float16 or bfloat16 values uniform in
// [-1, 1) (float16: the 11-bit multiples of 2^-10; bfloat16: float32 values truncated to their
// high half), or raw bytes (any byte is a valid int8 value or pair of int4 values).
Buffer RandomBuffer(size_t bytes, Fill fill, uint64_t seed) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  Buffer buffer(static_cast<unsigned char*>(std::aligned_alloc(64, rounded)));
  if (!buffer) return buffer;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  if (fill == Fill::kFloat32) {
    auto* f = reinterpret_cast<float*>(buffer.get());
    for (size_t i = 0; i < rounded / 4; ++i) {
      f[i] = static_cast<float>(static_cast<int64_t>(next() >> 40) - (1 << 23)) / (1 << 23);
    }
  } else if (fill == Fill::kBFloat16) {
    auto* h = reinterpret_cast<uint16_t*>(buffer.get());
    for (size_t i = 0; i < rounded / 2; ++i) {
      const float f =
          static_cast<float>(static_cast<int64_t>(next() >> 40) - (1 << 23)) / (1 << 23);
      uint32_t bits = 0;
      std::memcpy(&bits, &f, 4);
      h[i] = static_cast<uint16_t>(bits >> 16);
    }
  } else if (fill == Fill::kFloat16) {
    // m * 2^-10 for m in [-1024, 1024): exact in float16; encoded by hand (sign, exponent, the
    // 10 bits below the leading one), 0 as +0.
    auto* h = reinterpret_cast<uint16_t*>(buffer.get());
    for (size_t i = 0; i < rounded / 2; ++i) {
      const int m = static_cast<int>(next() >> 53) - 1024;
      const unsigned a = static_cast<unsigned>(m < 0 ? -m : m);
      uint16_t bits = 0;
      if (a != 0) {
        const int top = 31 - __builtin_clz(a);  // a = 2^top * 1.f
        const unsigned exponent = static_cast<unsigned>(top - 10 + 15);
        const unsigned fraction = (a << (10 - top)) & 0x3FF;
        bits = static_cast<uint16_t>((m < 0 ? 0x8000 : 0) | (exponent << 10) | fraction);
      }
      h[i] = bits;
    }
  } else {
    for (size_t i = 0; i < rounded; i += 8) {
      const uint64_t word = next();
      std::memcpy(buffer.get() + i, &word, 8);
    }
    // Blocks: random codes under a float16 scale in [2^-7, 2^-6) (never NaN, Inf or subnormal).
    if (fill == Fill::kQ8_0Blocks || fill == Fill::kQ4_0Blocks) {
      const size_t block = fill == Fill::kQ8_0Blocks ? ATTNRT_GQA_QUANT_Q8_0_BLOCK_BYTES
                                                     : ATTNRT_GQA_QUANT_Q4_0_BLOCK_BYTES;
      for (size_t i = 0; i + block <= bytes; i += block) {
        const auto d = static_cast<uint16_t>(0x2000 | (next() & 0x3FF));
        std::memcpy(buffer.get() + i, &d, sizeof d);
      }
    }
  }
  return buffer;
}

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

// One complete set of inputs and outputs of a call; the working set rotates over several.
struct Copy {
  std::vector<Buffer> buffers;
  std::vector<std::unique_ptr<Tensor>> tensors;
  const attnrt_tensor* inputs[ATTNRT_GQA_NUM_INPUTS] = {};
  const attnrt_tensor* outputs[ATTNRT_GQA_NUM_OUTPUTS] = {};

  Tensor* Add(size_t bytes, Fill fill, attnrt_dtype dtype, std::vector<int64_t> shape,
              uint64_t seed) {
    buffers.push_back(RandomBuffer(bytes, fill, seed));
    tensors.push_back(std::make_unique<Tensor>(buffers.back().get(), dtype, std::move(shape)));
    return tensors.back().get();
  }
};

struct Problem {
  bool decode = true;
  Cache cache = Cache::kFloat32;
  int64_t length = 0;  // decode: past rows P; prefill: S = T
  bool operator==(const Problem&) const = default;
};

// The rotated working set of a problem. Kept between benchmark runs (every kernel of a problem
// reuses it); replaced when the problem changes, so at most one is alive.
struct WorkingSet {
  Problem problem;
  size_t copy_bytes = 0;  // bytes of one copy's rotated data (KV cache, or a prompt's tensors)
  std::vector<std::unique_ptr<Copy>> copies;
  int32_t seqlens_k = 0;
  int32_t total = 0;
  std::vector<float> k_scale, v_scale;
  std::unique_ptr<Tensor> seqlens_tensor, total_tensor, k_scale_tensor, v_scale_tensor;
};

size_t CopiesFor(size_t copy_bytes) {
  // Total > 2x L3, and at least 2 copies: the copy an iteration runs on was last touched two or
  // more L3-sized working sets ago, so none of it is still in the cache.
  return std::max<size_t>(2, 2 * g_limits.l3_bytes / std::max<size_t>(copy_bytes, 1) + 1);
}

WorkingSet& GetWorkingSet(const Problem& problem) {
  static std::unique_ptr<WorkingSet> current;
  if (current && current->problem == problem) return *current;
  current.reset();  // free the previous one first
  auto ws = std::make_unique<WorkingSet>();
  ws->problem = problem;
  const int64_t s = problem.decode ? 1 : problem.length;
  const int64_t rows = problem.decode ? problem.length + 1 : problem.length;  // T
  ws->seqlens_k = static_cast<int32_t>(rows - 1);
  ws->total = static_cast<int32_t>(rows);
  ws->seqlens_tensor = std::make_unique<Tensor>(&ws->seqlens_k, kI32, std::vector<int64_t>{1});
  ws->total_tensor = std::make_unique<Tensor>(&ws->total, kI32, std::vector<int64_t>{1});
  const bool blocks = problem.cache == Cache::kQ8_0 || problem.cache == Cache::kQ4_0;
  const bool quantized = problem.cache == Cache::kInt8 || problem.cache == Cache::kInt4 || blocks;
  // float16 and bfloat16 caches: the whole op in that type.
  const bool half = problem.cache == Cache::kFloat16 || problem.cache == Cache::kBFloat16;
  const bool brain = problem.cache == Cache::kBFloat16;
  const size_t float_bytes = half ? 2 : 4;
  const Fill float_fill = brain ? Fill::kBFloat16 : half ? Fill::kFloat16 : Fill::kFloat32;
  const attnrt_dtype float_dtype = brain ? kBF16 : half ? kF16 : kF32;
  if (quantized && !blocks) {
    // PER_CHANNEL: one scale per (KV head, channel); int8 values span about [-1.3, 1.3], int4 [-1,
    // 1].
    const float qmax = problem.cache == Cache::kInt8 ? 127.0f : 7.0f;
    for (int64_t c = 0; c < kKvNumHeads * kHeadSize; ++c) {
      ws->k_scale.push_back((1.0f + 0.25f * static_cast<float>(c % 5)) / qmax);
      ws->v_scale.push_back((1.0f + 0.25f * static_cast<float>(c % 3)) / qmax);
    }
    const std::vector<int64_t> scale_shape{kKvNumHeads * kHeadSize};
    ws->k_scale_tensor = std::make_unique<Tensor>(ws->k_scale.data(), kF32, scale_shape);
    ws->v_scale_tensor = std::make_unique<Tensor>(ws->v_scale.data(), kF32, scale_shape);
  }
  const size_t q_bytes = static_cast<size_t>(s * kNumHeads * kHeadSize) * float_bytes;
  const size_t kv_new_bytes = static_cast<size_t>(s * kKvNumHeads * kHeadSize) * float_bytes;
  const size_t cache_bytes = static_cast<size_t>(kKvNumHeads * rows * RowBytes(problem.cache));
  ws->copy_bytes =
      problem.decode ? 2 * cache_bytes : 2 * q_bytes + 2 * kv_new_bytes + 2 * cache_bytes;
  const size_t copies = CopiesFor(ws->copy_bytes);
  const attnrt_dtype cache_dtype =
      !quantized ? float_dtype : (problem.cache == Cache::kInt8 ? kI8 : kU8);
  const int64_t cache_cols = problem.cache == Cache::kInt4 ? kHeadSize / 2
                             : blocks                      ? RowBytes(problem.cache)
                                                           : kHeadSize;
  for (size_t c = 0; c < copies; ++c) {
    auto copy = std::make_unique<Copy>();
    const uint64_t seed = 1000 * (c + 1);
    Tensor* q =
        copy->Add(q_bytes, float_fill, float_dtype, {1, s, kNumHeads * kHeadSize}, seed + 1);
    Tensor* k =
        copy->Add(kv_new_bytes, float_fill, float_dtype, {1, s, kKvNumHeads * kHeadSize}, seed + 2);
    Tensor* v =
        copy->Add(kv_new_bytes, float_fill, float_dtype, {1, s, kKvNumHeads * kHeadSize}, seed + 3);
    Tensor* out =
        copy->Add(q_bytes, float_fill, float_dtype, {1, s, kNumHeads * kHeadSize}, seed + 4);
    const Fill cache_fill = problem.cache == Cache::kQ8_0   ? Fill::kQ8_0Blocks
                            : problem.cache == Cache::kQ4_0 ? Fill::kQ4_0Blocks
                            : quantized                     ? Fill::kBytes
                                                            : float_fill;
    const std::vector<int64_t> cache_shape{1, kKvNumHeads, rows, cache_cols};
    Tensor* cache_k = copy->Add(cache_bytes, cache_fill, cache_dtype, cache_shape, seed + 5);
    Tensor* cache_v = copy->Add(cache_bytes, cache_fill, cache_dtype, cache_shape, seed + 6);
    copy->inputs[ATTNRT_GQA_INPUT_QUERY] = &q->desc;
    copy->inputs[ATTNRT_GQA_INPUT_KEY] = &k->desc;
    copy->inputs[ATTNRT_GQA_INPUT_VALUE] = &v->desc;
    // Decode: the buffer of T rows is past (P rows used) and present (the new row appended in
    // place). Prefill: a first prompt without past writes a present of S rows. Quantized caches
    // need the past inputs (a zero-length one is fine, but the shared buffer is simpler).
    if (problem.decode || quantized) {
      copy->inputs[ATTNRT_GQA_INPUT_PAST_KEY] = &cache_k->desc;
      copy->inputs[ATTNRT_GQA_INPUT_PAST_VALUE] = &cache_v->desc;
    }
    copy->inputs[ATTNRT_GQA_INPUT_SEQLENS_K] = &ws->seqlens_tensor->desc;
    copy->inputs[ATTNRT_GQA_INPUT_TOTAL_SEQUENCE_LENGTH] = &ws->total_tensor->desc;
    if (quantized && !blocks) {
      copy->inputs[ATTNRT_GQA_INPUT_K_SCALE] = &ws->k_scale_tensor->desc;
      copy->inputs[ATTNRT_GQA_INPUT_V_SCALE] = &ws->v_scale_tensor->desc;
    }
    copy->outputs[ATTNRT_GQA_OUTPUT_OUTPUT] = &out->desc;
    copy->outputs[ATTNRT_GQA_OUTPUT_PRESENT_KEY] = &cache_k->desc;
    copy->outputs[ATTNRT_GQA_OUTPUT_PRESENT_VALUE] = &cache_v->desc;
    ws->copies.push_back(std::move(copy));
  }
  current = std::move(ws);
  return *current;
}

struct Handles {
  attnrt_runtime* runtime = nullptr;
  attnrt_op* op = nullptr;
  attnrt_plan* plan = nullptr;
  ~Handles() {
    attnrt_plan_release(plan);
    attnrt_op_destroy(op);
    attnrt_runtime_destroy(runtime);
  }
};

std::string MiB(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1fMiB", bytes / (1024.0 * 1024.0));
  return text;
}

void RunGqa(benchmark::State& state, const std::string& kernel, const Problem& problem,
            int num_threads) {
  Handles h;
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.kernel = kernel.c_str();  // an exact name is a glob that matches this kernel only
  options.num_threads = num_threads;
  if (attnrt_runtime_create(&options, &h.runtime) != ATTNRT_OK) {
    state.SkipWithError(attnrt_last_error_message());
    return;
  }
  int32_t threads = 0;
  attnrt_runtime_num_threads(h.runtime, &threads);
  attnrt_gqa_attributes attributes;
  attnrt_gqa_attributes_init(&attributes);
  attributes.num_heads = kNumHeads;
  attributes.kv_num_heads = kKvNumHeads;
  if (problem.cache == Cache::kInt8 || problem.cache == Cache::kInt4) {
    attributes.k_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
    attributes.v_quant_type = ATTNRT_GQA_QUANT_PER_CHANNEL;
    attributes.kv_cache_bit_width = problem.cache == Cache::kInt8 ? 8 : 4;
  } else if (problem.cache == Cache::kQ8_0 || problem.cache == Cache::kQ4_0) {
    attributes.k_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    attributes.v_quant_type = ATTNRT_GQA_QUANT_PER_BLOCK_32;
    attributes.kv_cache_bit_width = problem.cache == Cache::kQ8_0 ? 8 : 4;
  }
  if (attnrt_op_create(h.runtime, ATTNRT_OP_GQA, &attributes, &h.op) != ATTNRT_OK) {
    state.SkipWithError(attnrt_last_error_message());
    return;
  }
  WorkingSet& ws = GetWorkingSet(problem);
  if (ws.copies.empty() || !ws.copies.front()->buffers.front()) {
    state.SkipWithError("out of memory allocating the working set");
    return;
  }
  Copy& first = *ws.copies.front();
  if (attnrt_op_plan(h.op, first.inputs, ATTNRT_GQA_NUM_INPUTS, first.outputs,
                     ATTNRT_GQA_NUM_OUTPUTS, &h.plan) != ATTNRT_OK) {
    state.SkipWithError(attnrt_last_error_message());
    return;
  }
  attnrt_plan_info info;
  info.struct_size = sizeof(info);
  attnrt_plan_get_info(h.plan, &info);
  const size_t alignment = std::max<size_t>(info.workspace_alignment, 64);
  Buffer workspace(static_cast<unsigned char*>(
      std::aligned_alloc(alignment, (info.workspace_size + alignment) / alignment * alignment)));
  auto run = [&](Copy& copy) {
    return attnrt_plan_run(h.plan, copy.inputs, ATTNRT_GQA_NUM_INPUTS, copy.outputs,
                           ATTNRT_GQA_NUM_OUTPUTS, workspace.get(), info.workspace_size, nullptr);
  };
  if (run(first) != ATTNRT_OK) {  // untimed warm-up (thread pool, page faults of the workspace)
    state.SkipWithError(attnrt_last_error_message());
    return;
  }
  size_t next = 1 % ws.copies.size();
  std::chrono::steady_clock::time_point start{};
  bool started = false;
  for (auto _ : state) {
    if (!started) {  // the roofline percentages need the loop's own wall time
      start = std::chrono::steady_clock::now();
      started = true;
    }
    Copy& copy = *ws.copies[next];
    if (run(copy) != ATTNRT_OK) {
      state.SkipWithError(attnrt_last_error_message());
      break;
    }
    benchmark::DoNotOptimize(copy.outputs[ATTNRT_GQA_OUTPUT_OUTPUT]->data);
    benchmark::ClobberMemory();
    next = next + 1 == ws.copies.size() ? 0 : next + 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double iterations = static_cast<double>(state.iterations());

  const double s = problem.decode ? 1.0 : static_cast<double>(problem.length);
  const double t = static_cast<double>(ws.total);
  const double pairs = problem.decode ? t : s * (s + 1) / 2;  // visible (query, key) pairs, causal
  const double flops = 4.0 * kNumHeads * kHeadSize * pairs;
  const double bytes = problem.decode
                           ? 2.0 * kKvNumHeads * t * static_cast<double>(RowBytes(problem.cache))
                           : static_cast<double>(ws.copy_bytes);
  const auto rate = benchmark::Counter::kIsIterationInvariantRate;
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["FLOP/s"] = benchmark::Counter(flops, rate);
  if (started && seconds > 0) {
    if (problem.decode && g_limits.read_bytes_per_second > 0) {
      state.counters["%read_bw"] =
          100.0 * bytes * iterations / seconds / g_limits.read_bytes_per_second;
    }
    if (FmaPeakOf(info.kernel) > 0) {
      state.counters["%fma_peak"] = 100.0 * flops * iterations / seconds / FmaPeakOf(info.kernel);
    }
  }
  state.counters["threads"] = threads;
  state.SetLabel(std::string(info.kernel) + " rot " + std::to_string(ws.copies.size()) + "x" +
                 MiB(static_cast<double>(ws.copy_bytes)));
}

// GQA kernels on CPU, from every loaded plugin, in rank order.
std::vector<std::string> CpuGqaKernels(size_t* l3_from_plugin) {
  std::vector<std::string> names;
  attnrt_runtime* runtime = nullptr;
  if (attnrt_runtime_create(nullptr, &runtime) != ATTNRT_OK) {
    std::fprintf(stderr, "attnrt_runtime_create: %s\n", attnrt_last_error_message());
    return names;
  }
  size_t plugins = 0;
  attnrt_runtime_plugin_count(runtime, &plugins);
  for (size_t p = 0; p < plugins; ++p) {
    attnrt_plugin_info plugin;
    plugin.struct_size = sizeof(plugin);
    if (attnrt_runtime_plugin_info(runtime, p, &plugin) != ATTNRT_OK || !plugin.available) continue;
    for (size_t f = 0; f < plugin.num_facts; ++f) {
      const char* key = nullptr;
      const char* value = nullptr;
      if (attnrt_runtime_plugin_fact(runtime, p, f, &key, &value) == ATTNRT_OK &&
          std::strcmp(key, "l3_cache_bytes") == 0 && *l3_from_plugin == 0) {
        *l3_from_plugin = std::strtoull(value, nullptr, 10);
      }
    }
    for (size_t k = 0; k < plugin.num_kernels; ++k) {
      attnrt_kernel_info kernel;
      kernel.struct_size = sizeof(kernel);
      if (attnrt_runtime_plugin_kernel(runtime, p, k, &kernel) == ATTNRT_OK &&
          kernel.op_kind == ATTNRT_OP_GQA && kernel.device_type == ATTNRT_DEVICE_CPU) {
        names.emplace_back(kernel.name);
      }
    }
  }
  attnrt_runtime_destroy(runtime);
  return names;
}

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

void MeasureLimits(const std::vector<std::string>& kernels, size_t l3_from_plugin) {
  const size_t l3_sysfs = attnrt_bench::SysfsL3CacheBytes();
  g_limits.l3_bytes = l3_sysfs != 0 ? l3_sysfs : l3_from_plugin;
  std::string l3_source = l3_sysfs != 0 ? "sysfs" : "cpuinfo (cpu_x86 probe)";
  if (g_limits.l3_bytes == 0) {
    g_limits.l3_bytes = size_t{32} << 20;
    l3_source = "unknown; assumed";
  }
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const size_t read_bytes = std::max<size_t>(8 * g_limits.l3_bytes, size_t{512} << 20);
  const auto bw = attnrt_bench::MeasureReadBandwidth(read_bytes, hw, kLimitPasses);
  const auto bw1 = attnrt_bench::MeasureReadBandwidth(read_bytes, 1, kLimitPasses / 2);
  const auto fma = attnrt_bench::MeasureFmaPeak(hw, 0.05, kLimitPasses);
  const auto fma1 = attnrt_bench::MeasureFmaPeak(1, 0.05, kLimitPasses / 2);
  g_limits.read_bytes_per_second = bw.bytes_per_second;
  g_limits.fma_flops_per_second = fma.flops_per_second;
  const auto fma512 = attnrt_bench::MeasureFmaPeakAvx512(hw, 0.05, kLimitPasses);
  const auto fma512_1 = attnrt_bench::MeasureFmaPeakAvx512(1, 0.05, kLimitPasses / 2);
  g_limits.fma_avx512_flops_per_second = fma512.flops_per_second;

  std::string names;
  for (const auto& k : kernels) names += (names.empty() ? "" : ",") + k;
  benchmark::AddCustomContext("attnrt_kernels", names.empty() ? "(none found)" : names);
  benchmark::AddCustomContext("l3_bytes",
                              std::to_string(g_limits.l3_bytes) + " (" + l3_source + ")");
  benchmark::AddCustomContext(
      "rotation", "each benchmark rotates over copies of its working set totalling > 2x L3 (" +
                      MiB(2.0 * static_cast<double>(g_limits.l3_bytes)) + ")");
  benchmark::AddCustomContext(
      "roofline_read_bw", Format("%.2f GB/s", bw.bytes_per_second / 1e9) + " (" +
                              std::to_string(bw.threads) + " threads, streaming read of " +
                              MiB(static_cast<double>(bw.buffer_bytes)) +
                              (bw.avx2 ? ", AVX2 loads" : ", scalar loads") + ", best of " +
                              std::to_string(kLimitPasses) +
                              "; 1 thread: " + Format("%.2f GB/s)", bw1.bytes_per_second / 1e9));
  benchmark::AddCustomContext(
      "roofline_fma_peak", fma.avx2_fma ? Format("%.1f GFLOP/s", fma.flops_per_second / 1e9) +
                                              " (AVX2 FP32, 8 lanes x " + "2 FLOP x 12 chains, " +
                                              std::to_string(fma.threads) + " threads, best of " +
                                              std::to_string(kLimitPasses) + "; 1 thread: " +
                                              Format("%.1f GFLOP/s)", fma1.flops_per_second / 1e9)
                                        : std::string("not measured (no AVX2+FMA)"));
  benchmark::AddCustomContext(
      "roofline_fma_peak_avx512",
      fma512.avx512_fma
          ? Format("%.1f GFLOP/s", fma512.flops_per_second / 1e9) +
                " (AVX-512 FP32, 16 lanes x 2 FLOP x 12 chains, " + std::to_string(fma512.threads) +
                " threads, best of " + std::to_string(kLimitPasses) + "; 1 thread: " +
                Format("%.1f GFLOP/s; the *.avx512 kernels' roofline)",
                       fma512_1.flops_per_second / 1e9)
          : std::string("not measured (no AVX-512F+FMA with OS-enabled ZMM state)"));
  benchmark::AddCustomContext("not_benchmarked",
                              "QK and SV GEMM alone: not reachable through the public C ABI");
  benchmark::AddCustomContext("shapes",
                              "Llama-3-8B layer: B=1, num_heads 32, kv_num_heads 8, head_size 128");
}

void RegisterAll(const std::vector<std::string>& kernels) {
  for (const auto& kernel : kernels) {
    auto* b = benchmark::RegisterBenchmark(
        ("BM_GqaPrefill/" + kernel).c_str(), [kernel](benchmark::State& state) {
          RunGqa(state, kernel, {false, Cache::kFloat32, state.range(0)}, 0);
        });
    b->ArgName("S")->Arg(512)->Arg(1024)->Arg(2048)->Arg(4096);
    b->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  for (const auto& kernel : kernels) {
    auto* b = benchmark::RegisterBenchmark(
        ("BM_GqaPrefill/bf16/" + kernel).c_str(), [kernel](benchmark::State& state) {
          RunGqa(state, kernel, {false, Cache::kBFloat16, state.range(0)}, 0);
        });
    b->ArgName("S")->Arg(512)->Arg(1024)->Arg(2048)->Arg(4096);
    b->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  for (int threads : {0, kSplitKvThreads}) {
    for (Cache cache : {Cache::kFloat32, Cache::kFloat16, Cache::kBFloat16, Cache::kInt8,
                        Cache::kInt4, Cache::kQ8_0, Cache::kQ4_0}) {
      for (const auto& kernel : kernels) {
        const std::string prefix =
            threads == 0 ? std::string("BM_GqaDecode/")
                         : "BM_GqaDecodeSplitKv/threads:" + std::to_string(threads) + "/";
        auto* b = benchmark::RegisterBenchmark(
            (prefix + CacheName(cache) + "/" + kernel).c_str(),
            [kernel, cache, threads](benchmark::State& state) {
              RunGqa(state, kernel, {true, cache, state.range(0)}, threads);
            });
        b->ArgName("past")->Arg(1024)->Arg(4096)->Arg(16384)->Arg(65536);
        b->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Listing the benchmarks needs no measurement of the machine (it takes a few seconds).
  bool list_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    list_only =
        list_only || arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true";
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  size_t l3_from_plugin = 0;
  const std::vector<std::string> kernels = CpuGqaKernels(&l3_from_plugin);
  if (!list_only) MeasureLimits(kernels, l3_from_plugin);
  RegisterAll(kernels);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
