// bench_sparse_mla: MixedQuantSparseFlashMla through the public C ABI, one benchmark per (case,
// kernel). The kernels of ATTNRT_OP_SPARSE_MLA are listed at startup with
// attnrt_runtime_plugin_kernel and each is pinned by name (attnrt_runtime_options.kernel), so a new
// kernel gets its rows without an edit here. Benchmark names: <case>/<kernel>, the case being
//   csa_decode/q<mode>/h<heads>/B<batch>  B sequences x 1 query token, S2 8192, top-k 2048, r 4
//   swa_decode/q<mode>/h64/B4             the 128-token window alone, S2 8192
//   hca_decode/q<mode>/h64/B4             window + every visible compressed token, r 128, S2 32k
//   csa_prefill128/q<mode>/h64/B1         the last 128 query rows of a 4096-token prompt
// for quant_mode 1, 2 and 3 (sparse_mla_problem.cpp builds the inputs). The metadata op runs once
// per benchmark, outside the timed loop (as a decode loop reuses it across layers).
//
// Counters: tokens/s (query rows per second), KV_GB/s (bytes of the tokens each row attends, once
// per row), GFLOP/s (fp32-equivalent: 4 * 512 * heads FLOPs per attended (row, key): QK^T and
// P.V, 2 FLOP per multiply-add, whatever arithmetic the kernel uses), %fma_peak (GFLOP/s over the
// FP32 FMA peak of the kernel's ISA, measured at startup on the runtime's thread count: the
// AVX-512 peak for *.avx512 and *.avx512_bf16 kernels, the latter can exceed 100; the AVX2 peak for
// *.avx2; none for scalar, NEON or other kernels), threads.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "attnrt/attnrt.h"
#include "attnrt/ops/sparse_mla.h"
#include "machine_limits.h"
#include "sparse_mla_problem.h"

namespace {

using attnrt_bench::SparseMlaCase;
using attnrt_bench::SparseMlaProblem;

constexpr int kPeakRepetitions = 100;  // best of; other load only slows a repetition
constexpr double kPeakSeconds = 0.01;  // short: on a shared machine some repetition runs alone

struct Peaks {
  double avx2 = 0;    // FLOP/s; 0 when not measured
  double avx512 = 0;  // FLOP/s; 0 when the CPU/OS lacks AVX-512F
} g_peaks;

// The FMA peak a kernel is measured against, from its name's ISA suffix ("...flash.avx2"): the
// AVX2 one for avx2, the AVX-512 FP32 one for avx512, avx512_* and amx_bf16 (bf16 dot products
// and AMX tiles included: fp32-equivalent FLOPs against the fp32 peak); 0 (no %fma_peak) for
// scalar, neon and the rest.
double FmaPeakOf(const std::string& kernel) {
  const std::string isa = kernel.substr(kernel.rfind('.') + 1);
  if (isa == "avx2") return g_peaks.avx2;
  if (isa == "avx512" || isa.rfind("avx512_", 0) == 0 || isa == "amx_bf16") {
    return g_peaks.avx512;
  }
  return 0;
}

struct Handles {
  attnrt_runtime* runtime = nullptr;
  attnrt_op* md_op = nullptr;
  attnrt_op* op = nullptr;
  attnrt_plan* md_plan = nullptr;
  attnrt_plan* plan = nullptr;
  ~Handles() {
    attnrt_plan_release(plan);
    attnrt_plan_release(md_plan);
    attnrt_op_destroy(op);
    attnrt_op_destroy(md_op);
    attnrt_runtime_destroy(runtime);
  }
};

// The inputs of the case being run, kept while its kernels run one after the other.
SparseMlaProblem* ProblemOf(const SparseMlaCase& c) {
  static std::unique_ptr<SparseMlaProblem> problem;
  if (!problem || problem->c.Name() != c.Name()) {
    problem.reset();
    problem = attnrt_bench::BuildSparseMlaProblem(c);
  }
  return problem.get();
}

constexpr size_t kNumIn = ATTNRT_SPARSE_MLA_NUM_INPUTS;
constexpr size_t kNumOut = ATTNRT_SPARSE_MLA_NUM_OUTPUTS;

// A runtime pinned to `kernel`, the metadata op run for p, and the main op's plan; the status of
// the first step that fails.
attnrt_status Plan(const std::string& kernel, SparseMlaProblem* p, Handles* h) {
  attnrt_runtime_options options;
  attnrt_runtime_options_init(&options);
  options.kernel = kernel.c_str();  // an exact name is a glob that matches this kernel only
  const attnrt_sparse_mla_attributes a = p->c.Attributes();
  const attnrt_tensor* md_out[1] = {&p->metadata.t};
  p->inputs[ATTNRT_SPARSE_MLA_INPUT_METADATA] = nullptr;
  attnrt_status status = attnrt_runtime_create(&options, &h->runtime);
  if (status == ATTNRT_OK) {
    status = attnrt_op_create(h->runtime, ATTNRT_OP_SPARSE_MLA_METADATA, &a, &h->md_op);
  }
  if (status == ATTNRT_OK)
    status = attnrt_op_plan(h->md_op, p->inputs, kNumIn, md_out, 1, &h->md_plan);
  if (status == ATTNRT_OK) {
    status = attnrt_plan_run(h->md_plan, p->inputs, kNumIn, md_out, 1, nullptr, 0, nullptr);
  }
  p->inputs[ATTNRT_SPARSE_MLA_INPUT_METADATA] = &p->metadata.t;
  if (status == ATTNRT_OK) status = attnrt_op_create(h->runtime, ATTNRT_OP_SPARSE_MLA, &a, &h->op);
  if (status == ATTNRT_OK) {
    status = attnrt_op_plan(h->op, p->inputs, kNumIn, p->outputs, kNumOut, &h->plan);
  }
  return status;
}

void Run(benchmark::State& state, const std::string& kernel, const SparseMlaCase& c) {
  SparseMlaProblem* p = nullptr;
  try {
    p = ProblemOf(c);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  Handles h;
  if (Plan(kernel, p, &h) != ATTNRT_OK) {
    state.SkipWithError(attnrt_last_error_message());
    return;
  }
  int32_t threads = 0;
  attnrt_runtime_num_threads(h.runtime, &threads);
  attnrt_plan_info info;
  info.struct_size = sizeof(info);
  attnrt_plan_get_info(h.plan, &info);
  const size_t alignment = info.workspace_alignment > 64 ? info.workspace_alignment : 64;
  const size_t ws_bytes = (info.workspace_size + alignment) / alignment * alignment;
  std::unique_ptr<void, void (*)(void*)> workspace(std::aligned_alloc(alignment, ws_bytes),
                                                   &std::free);
  auto run = [&] {
    return attnrt_plan_run(h.plan, p->inputs, kNumIn, p->outputs, kNumOut, workspace.get(),
                           info.workspace_size, nullptr);
  };
  if (!workspace || run() != ATTNRT_OK) {  // untimed warm-up: thread pool, first-touch pages
    state.SkipWithError(workspace ? attnrt_last_error_message() : "out of memory (workspace)");
    return;
  }
  bool failed = false;
  std::chrono::steady_clock::time_point start{};
  bool started = false;
  for (auto _ : state) {
    if (!started) {  // GFLOP/s and %fma_peak from the loop's own wall time
      start = std::chrono::steady_clock::now();
      started = true;
    }
    if (run() != ATTNRT_OK) {
      state.SkipWithError(attnrt_last_error_message());
      failed = true;
      break;
    }
    benchmark::ClobberMemory();
  }
  if (failed) return;
  const auto rate = benchmark::Counter::kIsIterationInvariantRate;
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(p->query_tokens), rate);
  state.counters["KV_GB/s"] = benchmark::Counter(static_cast<double>(p->kv_bytes) * 1e-9, rate);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (started && seconds > 0) {
    const double flops_per_second = p->Flops() * static_cast<double>(state.iterations()) / seconds;
    state.counters["GFLOP/s"] = flops_per_second * 1e-9;
    const double peak = FmaPeakOf(info.kernel);
    if (peak > 0) state.counters["%fma_peak"] = 100.0 * flops_per_second / peak;
  }
  state.counters["threads"] = threads;
  const double keys = static_cast<double>(p->ori_keys + p->cmp_keys);
  char text[64];
  std::snprintf(text, sizeof(text), ", %.0f keys/row", keys / static_cast<double>(p->query_tokens));
  state.SetLabel(std::string(info.kernel) + " (" + c.Describe() + text + ")");
}

// Sparse MLA kernels from every loaded plugin that can run here, in rank order; the runtime's
// default thread count in *threads. A kernel that declines a small SWA decode (ATTNRT_ERROR_
// UNSUPPORTED: an ISA this CPU lacks) is left out, with its reason in *declined.
std::vector<std::string> SparseMlaKernels(int32_t* threads, std::string* declined) {
  std::vector<std::string> names;
  attnrt_runtime* runtime = nullptr;
  if (attnrt_runtime_create(nullptr, &runtime) != ATTNRT_OK) {
    std::fprintf(stderr, "attnrt_runtime_create: %s\n", attnrt_last_error_message());
    return names;
  }
  attnrt_runtime_num_threads(runtime, threads);
  size_t plugins = 0;
  attnrt_runtime_plugin_count(runtime, &plugins);
  for (size_t pi = 0; pi < plugins; ++pi) {
    attnrt_plugin_info plugin;
    plugin.struct_size = sizeof(plugin);
    if (attnrt_runtime_plugin_info(runtime, pi, &plugin) != ATTNRT_OK || !plugin.available) {
      continue;
    }
    for (size_t k = 0; k < plugin.num_kernels; ++k) {
      attnrt_kernel_info kernel;
      kernel.struct_size = sizeof(kernel);
      if (attnrt_runtime_plugin_kernel(runtime, pi, k, &kernel) == ATTNRT_OK &&
          kernel.op_kind == ATTNRT_OP_SPARSE_MLA && kernel.device_type == ATTNRT_DEVICE_CPU) {
        names.emplace_back(kernel.name);
      }
    }
  }
  attnrt_runtime_destroy(runtime);
  SparseMlaCase probe;
  probe.scenario = ATTNRT_SPARSE_MLA_SWA;
  probe.ratio = 1;
  probe.s2 = 256;
  std::unique_ptr<SparseMlaProblem> p;
  try {
    p = attnrt_bench::BuildSparseMlaProblem(probe);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return names;
  }
  std::vector<std::string> runnable;
  for (const std::string& name : names) {
    Handles h;
    if (Plan(name, p.get(), &h) == ATTNRT_ERROR_UNSUPPORTED) {
      *declined += (declined->empty() ? "" : "; ") + name + ": " + attnrt_last_error_message();
    } else {
      runnable.push_back(name);
    }
  }
  return runnable;
}

std::string Gflops(double flops_per_second) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GFLOP/s", flops_per_second * 1e-9);
  return text;
}

// "252.1 GFLOP/s (AVX2 FP32 FMA, 2 threads, ...; 1 thread: 126.2 GFLOP/s; %fma_peak of *.avx2)",
// flagged when the threads together fall short of `threads` times one thread's peak: other work
// held a core through every repetition, and the %fma_peak of this run are overstated.
std::string PeakContext(const attnrt_bench::FmaPeak& all, const attnrt_bench::FmaPeak& one,
                        const char* isa, const char* kernels) {
  std::string text =
      Gflops(all.flops_per_second) + " (" + isa + " FP32 FMA, " + std::to_string(all.threads) +
      " threads, 12 independent chains each, best of " + std::to_string(kPeakRepetitions) + " x " +
      std::to_string(static_cast<int>(kPeakSeconds * 1000)) +
      " ms; 1 thread: " + Gflops(one.flops_per_second) + "; %fma_peak of " + kernels + ")";
  if (all.flops_per_second < 0.9 * all.threads * one.flops_per_second) {
    text += " BELOW " + std::to_string(all.threads) +
            " x the 1-thread peak: the machine was busy, %fma_peak overstated";
  }
  return text;
}

void MeasurePeaks(const std::vector<std::string>& kernels, const std::string& declined,
                  int32_t threads) {
  using attnrt_bench::FmaPeak;
  // The 1-thread peak, then the all-thread one, measured again (up to 3 times in all, the best
  // kept) while it stays below threads x the 1-thread peak.
  auto measure = [threads](FmaPeak (*peak)(int, double, int), FmaPeak* one) {
    *one = peak(1, kPeakSeconds, kPeakRepetitions / 2);
    FmaPeak all = peak(threads, kPeakSeconds, kPeakRepetitions);
    for (int again = 0; again < 2 && all.flops_per_second < 0.9 * threads * one->flops_per_second;
         ++again) {
      const FmaPeak retry = peak(threads, kPeakSeconds, kPeakRepetitions);
      if (retry.flops_per_second > all.flops_per_second) all = retry;
    }
    return all;
  };
  FmaPeak fma1, fma512_1;
  const FmaPeak fma = measure(&attnrt_bench::MeasureFmaPeak, &fma1);
  const FmaPeak fma512 = measure(&attnrt_bench::MeasureFmaPeakAvx512, &fma512_1);
  g_peaks.avx2 = fma.flops_per_second;
  g_peaks.avx512 = fma512.flops_per_second;
  std::string names;
  for (const auto& k : kernels) names += (names.empty() ? "" : ",") + k;
  benchmark::AddCustomContext("attnrt_kernels", names.empty() ? "(none found)" : names);
  if (!declined.empty()) benchmark::AddCustomContext("attnrt_kernels_declined", declined);
  benchmark::AddCustomContext("attnrt_threads", std::to_string(threads) +
                                                    " (the runtime's default: ATTNRT_NUM_THREADS, "
                                                    "else the hardware threads)");
  benchmark::AddCustomContext("fma_peak_avx2", fma.avx2_fma
                                                   ? PeakContext(fma, fma1, "AVX2", "*.avx2")
                                                   : std::string("not measured (no AVX2+FMA)"));
  benchmark::AddCustomContext(
      "fma_peak_avx512",
      fma512.avx512_fma ? PeakContext(fma512, fma512_1, "AVX-512", "*.avx512 and *.avx512_bf16")
                        : std::string("not measured (no AVX-512F+FMA with OS-enabled ZMM state)"));
  benchmark::AddCustomContext("flops", "fp32-equivalent: 4 x 512 x heads per attended (row, key)");
}

void RegisterAll(const std::vector<std::string>& kernels) {
  for (const SparseMlaCase& c : attnrt_bench::SparseMlaCases()) {
    for (const std::string& kernel : kernels) {
      benchmark::RegisterBenchmark((c.Name() + "/" + kernel).c_str(),
                                   [kernel, c](benchmark::State& s) { Run(s, kernel, c); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
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
  int32_t threads = 1;
  std::string declined;
  const std::vector<std::string> kernels = SparseMlaKernels(&threads, &declined);
  if (!list_only) MeasurePeaks(kernels, declined, threads);
  RegisterAll(kernels);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
