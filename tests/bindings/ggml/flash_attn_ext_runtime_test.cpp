// libattnrt_ggml.so as a ggml host drives it (docs/llama-cpp.md): thread counts changed between
// calls, two backends computing at once, ATTNRT_GGML=0, nodes it declines (a non-contiguous
// output; a node computed anyway fails with a message), n_q = 0, and the memory a converted mask
// takes. The node builder and the float64 reference are in flash_attn_ext_harness.h.
#include <sys/resource.h>

#include <string>
#include <thread>

#include "flash_attn_ext_harness.h"

namespace {

using fa_harness::Causal;
using fa_harness::Check;
using fa_harness::Seed;
using fa_harness::Shared;
using fa_harness::Spec;

TEST(GgmlFlashAttnExtRuntime, NoQueryRows) {
  // n_q = 0 (ggml itself cannot build a node of zero streams): nothing to compute or crash on.
  Spec s;
  s.rows = 0;
  s.mask_rows = 1;
  fa_harness::Node n;
  fa_harness::Build(s, Seed(), &n);
  ggml_backend_t attnrt = Shared().attnrt;
  ASSERT_NE(attnrt, nullptr);
  if (ggml_backend_supports_op(attnrt, n.out)) {
    EXPECT_EQ(ggml_backend_graph_compute(attnrt, n.graph), GGML_STATUS_SUCCESS);
  }
}

// 64 heads of ALiBi over 256 rows and 16384 keys: a bias of 512 MiB if made at once, for inputs
// of 9 MiB. Exits 0 when the node computes and the peak resident size grows by less than 128 MiB.
void ComputeALargeConvertedMaskAndExit() {
  ggml_backend_t attnrt = Shared().attnrt;
  if (attnrt == nullptr) std::exit(2);
  std::vector<float> out;
  {
    fa_harness::Node warm;  // plugins loaded, runtime made
    fa_harness::Build(Spec(), 1, &warm);
    fa_harness::Run(attnrt, warm, &out);
  }
  Spec s;
  s.head_size = 8;
  s.heads = 64;
  s.kv_heads = 1;
  s.total = 16384;
  s.rows = 256;
  s.max_bias = 8.0f;
  s.mask_fn = [](int64_t, int64_t, int64_t, int64_t) { return 0.0f; };
  fa_harness::Node n;
  fa_harness::Build(s, 2, &n);
  rusage before{};
  rusage after{};
  getrusage(RUSAGE_SELF, &before);
  const ggml_status status = fa_harness::Run(attnrt, n, &out);
  getrusage(RUSAGE_SELF, &after);
  const long grown_mib = (after.ru_maxrss - before.ru_maxrss) / 1024;
  std::fprintf(stderr, "peak resident size grew by %ld MiB\n", grown_mib);
  std::exit(status == GGML_STATUS_SUCCESS && grown_mib < 128 ? 0 : 1);
}

TEST(GgmlFlashAttnExtRuntimeDeathTest, ConvertedMaskMemoryIsBounded) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: its own peak
  EXPECT_EXIT(ComputeALargeConvertedMaskAndExit(), testing::ExitedWithCode(0), "");
}

TEST(GgmlFlashAttnExtRuntime, ThreadCountsBetweenCalls) {
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  ggml_backend_t backend = be.NewAttnrt();
  int index = 0;
  for (int threads : {1, 2, 3, 1, 4, 2}) {
    be.SetThreads(backend, threads);
    for (bool causal : {false, true}) {
      Spec s;
      s.rows = 9;
      s.total = 200;
      s.streams = 2;
      s.mask_streams = 2;
      if (causal) s.mask_fn = Causal(s.rows, s.total);
      Check(s, Seed() + static_cast<uint64_t>(index++),
            std::to_string(threads) + " threads" + (causal ? " causal" : ""), backend,
            /*check_cpu=*/false);
    }
  }
  ggml_backend_free(backend);
}

TEST(GgmlFlashAttnExtRuntime, TwoBackendsComputingAtOnce) {
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  ggml_backend_t backends[2] = {be.NewAttnrt(), be.NewAttnrt()};
  be.SetThreads(backends[0], 2);
  be.SetThreads(backends[1], 1);
  std::vector<size_t> bad(2, 0);
  auto work = [&](int w) {
    for (int iter = 0; iter < 6; ++iter) {
      Spec s;
      s.rows = iter % 2 ? 1 : 7;
      s.total = 150 + 10 * w;
      s.heads = 8;
      s.mask_fn = Causal(s.rows, s.total);
      fa_harness::Node n;
      fa_harness::Build(s, Seed() + static_cast<uint64_t>(100 * w + iter), &n);
      const std::vector<double> want = fa_harness::Reference(n);
      std::vector<float> got;
      if (fa_harness::Run(backends[w], n, &got) != GGML_STATUS_SUCCESS) {
        ++bad[static_cast<size_t>(w)];
        continue;
      }
      for (size_t i = 0; i < want.size(); ++i) {
        const double tol = fa_harness::Tolerance(s.kv_type);
        if (!(std::fabs(got[i] - want[i]) <= tol + tol * std::fabs(want[i]))) {
          ++bad[static_cast<size_t>(w)];
        }
      }
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(bad[0], 0u);
  EXPECT_EQ(bad[1], 0u);
  ggml_backend_free(backends[0]);
  ggml_backend_free(backends[1]);
}

TEST(GgmlFlashAttnExtRuntime, NonContiguousOutputIsDeclined) {
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  Spec s;
  fa_harness::Node n;
  fa_harness::Build(s, Seed(), &n);
  ASSERT_TRUE(ggml_backend_supports_op(be.attnrt, n.out));
  std::swap(n.out->nb[1], n.out->nb[2]);
  std::swap(n.out->ne[1], n.out->ne[2]);
  EXPECT_FALSE(ggml_backend_supports_op(be.attnrt, n.out));
}

TEST(GgmlFlashAttnExtRuntime, ANodeItDeclinesFailsWithAMessageWhenComputedAnyway) {
  // ggml's scheduler never hands it such a node; a host calling graph_compute directly gets
  // GGML_STATUS_FAILED (and a message on stderr), not a crash.
  fa_harness::Backends& be = Shared();
  ASSERT_NE(be.attnrt, nullptr);
  ggml_init_params params = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 64, 2, 4);
  // Q4_1: a block type attnrt's kernels do not read (Q8_0 and Q4_0 are served).
  ggml_tensor* k = ggml_new_tensor_3d(ctx, GGML_TYPE_Q4_1, 64, 32, 2);
  ggml_tensor* v = ggml_new_tensor_3d(ctx, GGML_TYPE_Q4_1, 64, 32, 2);
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, nullptr, 0.125f, 0, 0);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  ggml_backend_buffer_t buffer =
      ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
  ggml_backend_buffer_clear(buffer, 0);
  EXPECT_FALSE(ggml_backend_supports_op(be.attnrt, out));
  testing::internal::CaptureStderr();
  EXPECT_EQ(ggml_backend_graph_compute(be.attnrt, graph), GGML_STATUS_FAILED);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("q4_1"), std::string::npos);
  ggml_backend_buffer_free(buffer);
  ggml_free(ctx);
}

TEST(GgmlFlashAttnExtRuntimeDeathTest, AttnrtGgmlZeroHidesTheDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("ATTNRT_GGML", "0", 1);
        ggml_backend_reg_t reg = ggml_backend_load(ATTNRT_GGML_BACKEND_PATH);
        std::exit(reg == nullptr || ggml_backend_reg_dev_count(reg) == 0 ? 0 : 3);
      },
      testing::ExitedWithCode(0), "");
}

void CaptureLog(ggml_log_level /*level*/, const char* text, void* user_data) {
  static_cast<std::string*>(user_data)->append(text);
}

TEST(GgmlFlashAttnExtRuntime, ALibraryOfAnotherApiVersionIsSkippedWithAMessage) {
  // What a libattnrt_ggml.so built against another ggml meets: ggml's loader refuses it by
  // api_version and says so; the backends already loaded keep working.
  ASSERT_NE(Shared().attnrt, nullptr);
  std::string log;
  ggml_log_set(CaptureLog, &log);
  ggml_backend_reg_t reg = ggml_backend_load(ATTNRT_GGML_API_MISMATCH_PATH);
  ggml_log_set(nullptr, nullptr);
  EXPECT_EQ(reg, nullptr);
  EXPECT_NE(log.find("incompatible API version"), std::string::npos) << log;
  EXPECT_NE(ggml_backend_dev_by_name("ATTNRT"), nullptr);
  Spec s;
  const fa_harness::Outcome o = Check(s, Seed() + 41, "after the refused library");
  EXPECT_TRUE(o.claimed);
}

}  // namespace
